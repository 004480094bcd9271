// The official A2A JavaScript client (npm @a2a-js/sdk: ClientFactory with
// its v0.3 compatibility on, which picks the v0.3 JSON-RPC transport from
// agentic-host's v0.3 card) against agentic-host serve's /a2a/{agent},
// driven by internal/cli/a2a_test.go. It prints one JSON report on stdout;
// the Go test checks it against the server's ledger.
//
//   node client.mjs '{"base":"http://127.0.0.1:PORT","key":"…","otherKey":"…","long":"…"}'
//
// Scenarios:
//   card       the card, found from the agent's base URL
//   blocking   message/send, waiting for the end
//   polling    message/send returning at once, then tasks/get until done
//   stream     message/stream: the text arrives in pieces, then the end
//   resume     message/stream left mid-run; tasks/resubscribe shows the
//              task so far, then the rest and the end
//   cancel     tasks/cancel of a task in flight; again: not cancelable
//   approval   a publish_post call: input-required, then a data part
//              that approves it on the task; the task completes
//   keys       a wrong key, no key: refused; another tenant's task: not
//              found
import {
  ClientFactory,
  ClientFactoryOptions,
  DefaultAgentCardResolver,
  JsonRpcTransportFactory,
} from '@a2a-js/sdk/client';
import { Role, TaskState } from '@a2a-js/sdk';

const cfg = JSON.parse(process.argv[2]);
const agentURL = `${cfg.base}/a2a/default/`;

// The tenant's key goes with every request: the card's and the calls'.
const fetchWith = key => (input, init = {}) => {
  const headers = new Headers(init.headers ?? {});
  if (key) headers.set('Authorization', `Bearer ${key}`);
  return fetch(input, { ...init, headers });
};

const factoryFor = key =>
  new ClientFactory(
    ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
      cardResolver: new DefaultAgentCardResolver({ legacyCompat: { enabled: true }, fetchImpl: fetchWith(key) }),
      transports: [new JsonRpcTransportFactory({ legacyCompat: { enabled: true }, fetchImpl: fetchWith(key) })],
    })
  );

const message = (text, extra = {}) => ({
  messageId: `m-${Math.random().toString(36).slice(2)}`,
  contextId: '',
  taskId: '',
  role: Role.ROLE_USER,
  parts: [{ content: { $case: 'text', value: text }, filename: '', mediaType: '' }],
  extensions: [],
  referenceTaskIds: [],
  ...extra,
});

const stateName = s => TaskState[s] ?? String(s);
const textOfParts = parts =>
  (parts ?? []).map(p => (p.content?.$case === 'text' ? p.content.value : '')).join('');
const taskText = task => (task.artifacts ?? []).map(a => textOfParts(a.parts)).join('');
const statusText = task => textOfParts(task.status?.message?.parts);
const summary = task => ({
  id: task.id,
  contextId: task.contextId,
  state: stateName(task.status?.state),
  text: taskText(task),
  status: statusText(task),
  history: (task.history ?? []).map(m => textOfParts(m.parts)),
});
const errorOf = e => ({ name: e?.name, code: e?.envelopeCode ?? e?.cause?.envelopeCode, message: String(e?.message ?? e) });

// follow reads a stream's events: the task, the artifacts' text (an
// update without append replaces its artifact), the status updates.
class Follower {
  constructor() {
    this.kinds = [];
    this.texts = new Map();
    this.pieces = 0;
    this.task = undefined;
    this.final = undefined;
  }
  take(event) {
    const p = event.payload;
    switch (p?.$case) {
      case 'task':
        this.kinds.push('task');
        this.task = p.value;
        for (const a of p.value.artifacts ?? []) this.texts.set(a.artifactId, textOfParts(a.parts));
        if (this.taskState === undefined) this.taskState = stateName(p.value.status?.state);
        break;
      case 'artifactUpdate': {
        this.kinds.push('artifact-update');
        const a = p.value.artifact;
        const t = textOfParts(a.parts);
        if (t !== '') this.pieces++;
        this.texts.set(a.artifactId, (p.value.append ? this.texts.get(a.artifactId) ?? '' : '') + t);
        break;
      }
      case 'statusUpdate':
        this.kinds.push(`status-update(${stateName(p.value.status?.state)})`);
        this.final = stateName(p.value.status?.state);
        this.finalText = textOfParts(p.value.status?.message?.parts);
        break;
      default:
        this.kinds.push(p?.$case ?? 'unknown');
    }
  }
  text() {
    return [...this.texts.values()].join('');
  }
  report() {
    return { kinds: this.kinds, text: this.text(), pieces: this.pieces, final: this.final, finalText: this.finalText,
      taskId: this.task?.id, contextId: this.task?.contextId };
  }
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

async function main() {
  const report = {};
  const client = await factoryFor(cfg.key).createFromUrl(agentURL);

  const card = await client.getAgentCard();
  report.card = {
    name: card.name,
    streaming: card.capabilities?.streaming,
    interfaces: (card.supportedInterfaces ?? []).map(i => ({ url: i.url, binding: i.protocolBinding, version: i.protocolVersion })),
    transportVersion: client.protocolVersion,
  };

  // message/send, blocking.
  const blocking = await client.sendMessage({ message: message('hello there') });
  report.blocking = summary(blocking);
  report.blockingGet = summary(await client.getTask({ id: blocking.id, historyLength: 1 }));

  // message/send returning at once; then poll.
  const polled = await client.sendMessage({ message: message(cfg.long), configuration: { returnImmediately: true } });
  report.polling = { first: summary(polled) };
  for (let i = 0; ; i++) {
    const t = await client.getTask({ id: polled.id });
    if (stateName(t.status.state) !== 'TASK_STATE_WORKING') {
      report.polling.done = summary(t);
      break;
    }
    if (i > 6000) throw new Error('the polled task does not end');
    await sleep(10);
  }

  // message/stream, whole.
  {
    const f = new Follower();
    for await (const ev of client.sendMessageStream({ message: message(cfg.long) })) f.take(ev);
    report.stream = f.report();
  }

  // message/stream left mid-run, then tasks/resubscribe.
  {
    const f = new Follower();
    for await (const ev of client.sendMessageStream({ message: message(cfg.long) })) {
      f.take(ev);
      if (f.pieces >= 5) break; // the client leaves; the run goes on
    }
    const left = f.report();
    const r = new Follower();
    for await (const ev of client.resubscribeTask({ id: left.taskId })) r.take(ev);
    const after = await client.getTask({ id: left.taskId });
    report.resume = { left, resumed: r.report(), firstTaskText: taskText(r.task ?? {}), firstState: r.taskState, task: summary(after) };
    // A finished task: the task, its end, and the stream ends.
    const done = new Follower();
    for await (const ev of client.resubscribeTask({ id: left.taskId })) done.take(ev);
    report.resume.again = done.report();
  }

  // tasks/cancel.
  {
    const t = await client.sendMessage({ message: message(cfg.long), configuration: { returnImmediately: true } });
    const cancelled = await client.cancelTask({ id: t.id });
    report.cancel = { task: summary(cancelled) };
    try {
      await client.cancelTask({ id: t.id });
      report.cancel.again = { ok: true };
    } catch (e) {
      report.cancel.again = errorOf(e);
    }
  }

  // An approval: input-required, then a decision as a data part.
  {
    const asked = await client.sendMessage({ message: message('publish_post title=From-A2A body=Hello') });
    const data = (asked.status?.message?.parts ?? []).find(p => p.content?.$case === 'data')?.content.value;
    const approvalId = data?.approvals?.[0]?.approval_id;
    report.approval = { asked: summary(asked), approvalId };
    const decision = message('', { taskId: asked.id, contextId: asked.contextId });
    decision.parts = [{ content: { $case: 'data', value: { approval_id: approvalId, approve: true, reason: 'looks right' } }, filename: '', mediaType: '' }];
    report.approval.done = summary(await client.sendMessage({ message: decision }));
  }

  // Keys.
  report.keys = {};
  for (const [what, key] of [['wrong', 'ak_wrong'], ['none', '']]) {
    try {
      await factoryFor(key).createFromUrl(agentURL);
      report.keys[what] = { ok: true };
    } catch (e) {
      report.keys[what] = errorOf(e);
    }
  }
  try {
    // The right card, then calls with a wrong key.
    const c = await factoryFor(cfg.key).createFromAgentCard(card);
    const bad = await new ClientFactory(
      ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
        transports: [new JsonRpcTransportFactory({ legacyCompat: { enabled: true }, fetchImpl: fetchWith('ak_wrong') })],
      })
    ).createFromAgentCard(card);
    void c;
    await bad.getTask({ id: blocking.id });
    report.keys.wrongCall = { ok: true };
  } catch (e) {
    report.keys.wrongCall = errorOf(e);
  }
  try {
    const other = await factoryFor(cfg.otherKey).createFromUrl(agentURL);
    await other.getTask({ id: blocking.id });
    report.keys.otherTenant = { ok: true };
  } catch (e) {
    report.keys.otherTenant = errorOf(e);
  }

  process.stdout.write(JSON.stringify(report));
}

main().catch(e => {
  process.stdout.write(JSON.stringify({ error: String(e?.stack ?? e) }));
  process.exitCode = 1;
});
