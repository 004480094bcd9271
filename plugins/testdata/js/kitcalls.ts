// kitcalls exercises the TypeScript kit's idempotency key and waits, for
// TestKitsKeysAndWaits: keyed sends its input's url a GET and answers the
// key the host put on it; waits waits a millisecond, then for an event
// (which only a durable call may).
import { http, idempotencyKey, tool, waitEvent, waitFor } from "../../../pdk/ts/agentic";

tool({
  name: "keyed",
  description: "Sends a GET with the call's idempotency key.",
  effect: "external",
  execute: (input: { url: string }) => {
    const key = idempotencyKey();
    const res = http.get(input.url);
    return { key, body: res.body };
  },
});

tool({
  name: "waits",
  description: "Waits outside a durable call.",
  execute: () => {
    waitFor(1);
    let eventError: string | null = null;
    try {
      waitEvent("order-42-paid");
    } catch (e) {
      eventError = String((e as Error).message);
    }
    return { waited: true, event_error: eventError };
  },
});
