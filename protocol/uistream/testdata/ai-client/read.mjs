// The AI SDK's own client (npm ai: DefaultChatTransport, which parses and
// validates the stream against uiMessageChunkSchema, and
// readUIMessageStream, which builds the assistant's message) reading the
// golden streams of protocol/uistream/testdata, driven by golden_test.go.
// No server: the transport's fetch answers with the file's bytes.
//
//   node read.mjs FILE.sse...
//
// It prints one JSON line per file: {file, parts, error}, parts being the
// assistant message's parts as the client ended with them.
import { readFile } from 'node:fs/promises';
import { DefaultChatTransport, readUIMessageStream } from 'ai';

for (const file of process.argv.slice(2)) {
  const body = await readFile(file);
  const transport = new DefaultChatTransport({
    api: 'http://golden.invalid/v1/ui/chat',
    fetch: async () =>
      new Response(body, {
        status: 200,
        headers: {
          'content-type': 'text/event-stream',
          'x-vercel-ai-ui-message-stream': 'v1',
        },
      }),
  });
  const report = { file, parts: [], error: null };
  try {
    const stream = await transport.sendMessages({
      chatId: 'golden',
      messages: [{ id: 'u1', role: 'user', parts: [{ type: 'text', text: 'hi' }] }],
      trigger: 'submit-message',
      messageId: undefined,
      abortSignal: undefined,
    });
    let last;
    for await (const message of readUIMessageStream({
      stream,
      terminateOnError: true,
      onError: e => {
        report.error ??= String(e?.message ?? e);
      },
    })) {
      last = message;
    }
    report.parts = last?.parts ?? [];
  } catch (e) {
    report.error ??= String(e?.message ?? e);
  }
  process.stdout.write(JSON.stringify(report) + '\n');
}
