// The AI SDK's own UI client (npm ai: AbstractChat, the class useChat
// wraps, over DefaultChatTransport) against agentic-host serve's
// /v1/ui/chat, driven by internal/cli/uichat_test.go. It prints one JSON report on
// stdout; the Go test checks it against the server's ledger.
//
//   node client.mjs '{"api":"http://127.0.0.1:PORT/v1/ui/chat","key":"…","long":"…"}'
//
// Scenarios:
//   tool      a message that makes the model call get_account: the parts
//             the assistant's message ends with; then regenerate() and an
//             edited message, which the server refuses
//   resume    a long reply: stop() mid-stream, resumeStream(), the whole
//             reply; once it ended, resumeStream() finds no stream (204)
//   approval  a publish_post call: the stream ends with a
//             tool-approval-request, addToolApprovalResponse approves it,
//             sendAutomaticallyWhen sends it, the run goes on in the same
//             message
//   nokey     a transport without the key: the error the chat ends with
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
} from 'ai';

const cfg = JSON.parse(process.argv[2]);

// ChatState for Node: what @ai-sdk/react's Chat keeps in React state.
class NodeChatState {
  constructor(messages = []) {
    this.messages = messages;
    this.status = 'ready';
    this.error = undefined;
  }
  pushMessage = message => {
    this.messages = this.messages.concat(message);
  };
  popMessage = () => {
    this.messages = this.messages.slice(0, -1);
  };
  replaceMessage = (index, message) => {
    this.messages = [
      ...this.messages.slice(0, index),
      this.snapshot(message),
      ...this.messages.slice(index + 1),
    ];
  };
  snapshot = value => structuredClone(value);
}

class NodeChat extends AbstractChat {
  constructor({ messages, ...init }) {
    super({ ...init, state: new NodeChatState(messages) });
  }
}

const transport = (key = cfg.key) =>
  new DefaultChatTransport({
    api: cfg.api,
    headers: key ? { Authorization: `Bearer ${key}` } : {},
  });

const textOf = message =>
  (message?.parts ?? [])
    .filter(p => p.type === 'text')
    .map(p => p.text)
    .join('');

const lastAssistant = chat =>
  [...chat.messages].reverse().find(m => m.role === 'assistant');

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

async function waitFor(what, cond, ms = 60000) {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}

const errorOf = chat =>
  chat.error
    ? { message: chat.error.message, statusCode: chat.error.statusCode }
    : null;

async function tool() {
  const chat = new NodeChat({ id: cfg.sessions.tool, transport: transport() });
  await chat.sendMessage({ text: 'Please get_account account_id=42 and tell me its plan.' });
  const report = {
    status: chat.status,
    error: errorOf(chat),
    roles: chat.messages.map(m => m.role),
    messageId: lastAssistant(chat)?.id,
    parts: lastAssistant(chat)?.parts,
  };
  await chat.regenerate();
  report.regenerate = { status: chat.status, error: errorOf(chat) };
  chat.clearError();
  await chat.sendMessage({ text: 'an edit', messageId: chat.messages[0].id });
  report.edit = { status: chat.status, error: errorOf(chat) };
  return report;
}

async function resume() {
  const chat = new NodeChat({ id: cfg.sessions.resume, transport: transport() });
  const sending = chat.sendMessage({ text: cfg.long });
  // Some of the reply, then the client leaves.
  await waitFor('text to stream', () => textOf(lastAssistant(chat)).length >= 40);
  await chat.stop();
  await sending;
  const partial = textOf(lastAssistant(chat));
  const stopped = { status: chat.status, error: errorOf(chat), text: partial };
  await chat.resumeStream();
  const resumed = {
    status: chat.status,
    error: errorOf(chat),
    roles: chat.messages.map(m => m.role),
    messageId: lastAssistant(chat)?.id,
    text: textOf(lastAssistant(chat)),
    parts: lastAssistant(chat)?.parts.map(p => p.type),
  };
  // The run has ended: there is no stream to resume.
  await chat.resumeStream();
  const again = { status: chat.status, error: errorOf(chat), text: textOf(lastAssistant(chat)) };
  return { stopped, resumed, again };
}

async function approval() {
  let finished = 0;
  const chat = new NodeChat({
    id: cfg.sessions.approval,
    transport: transport(),
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    onFinish: () => {
      finished++;
    },
  });
  await chat.sendMessage({ text: 'Please publish_post title=Hello body=Greetings and say so.' });
  const asked = {
    status: chat.status,
    error: errorOf(chat),
    parts: structuredClone(lastAssistant(chat)?.parts),
  };
  const part = lastAssistant(chat)?.parts.find(
    p => p.type === 'tool-publish_post' && p.state === 'approval-requested',
  );
  if (!part) return { asked };
  await chat.addToolApprovalResponse({ id: part.approval.id, approved: true });
  await waitFor('the approved run to finish', () => finished >= 2 && chat.status !== 'submitted' && chat.status !== 'streaming');
  return {
    asked,
    approvalId: part.approval.id,
    done: {
      status: chat.status,
      error: errorOf(chat),
      roles: chat.messages.map(m => m.role),
      messageId: lastAssistant(chat)?.id,
      parts: lastAssistant(chat)?.parts,
    },
  };
}

async function nokey() {
  const chat = new NodeChat({ id: cfg.sessions.tool, transport: transport('') });
  await chat.sendMessage({ text: 'hello' });
  return { status: chat.status, error: errorOf(chat) };
}

const report = {};
try {
  report.tool = await tool();
  report.resume = await resume();
  report.approval = await approval();
  report.nokey = await nokey();
} catch (err) {
  report.error = String(err?.stack ?? err);
}
process.stdout.write(JSON.stringify(report));
