#!/usr/bin/env python3
"""A minimal OpenAI-compatible chat-completions server, independent of the
project's Go fake model (internal/fakemodel): the second server the step
and route benchmarks measure against (make bench-anchor, make load).
Python's standard library only.

It answers POST /v1/chat/completions, streamed (SSE, chunked, one chunk a
write) or not, in the shape of OpenRouter's streams in
shared/fixtures/stream_text.sse and stream_tool_calls.sse:

  - a conversation that ends with a tool result: "RESULT: " and the result;
  - a last user message "CALL tool {json}": that tool, called with those
    arguments (the anchor benchmark's request);
  - anything else: "You said: " and the last user message, a word a chunk.

Usage: leanmodel.py [--port 0] [--latency-ms 0]; it prints
"lean model listening; base URL http://127.0.0.1:PORT/v1".
"""
import argparse
import json
import re
import secrets
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CALL = re.compile(r"^CALL ([A-Za-z0-9_-]+) (\{.*\})$", re.S)
LATENCY = 0.0


def text_of(content):
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def reply_for(messages):
    """Returns (text, tool_call) for the conversation."""
    if messages and messages[-1].get("role") == "tool":
        return "RESULT: " + text_of(messages[-1].get("content")), None
    last = ""
    for m in reversed(messages):
        if m.get("role") == "user":
            last = text_of(m.get("content")).strip()
            break
    m = CALL.match(last)
    if m:
        try:
            json.loads(m.group(2))
            return "", (m.group(1), m.group(2))
        except ValueError:
            pass
    return "You said: " + last, None


def words(text):
    """Splits text into chunks of one word, each with the space before it."""
    return re.findall(r"\s*\S+", text) or [text]


def dumps(v):
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "leanmodel"
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path.rstrip("/").endswith("/models"):
            body = dumps({"data": [{"id": "fake/model", "context_length": 128000}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_error(404)

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        req = json.loads(self.rfile.read(n) or b"{}")
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self.send_error(404)
            return
        model = req.get("model") or "fake/model"
        text, call = reply_for(req.get("messages") or [])
        gen = "gen-%d-%s" % (int(time.time()), secrets.token_hex(8))
        created = int(time.time())
        finish = "tool_calls" if call else "stop"
        usage = {"prompt_tokens": 24, "completion_tokens": 9, "total_tokens": 33, "cost": 0.000009, "is_byok": False,
                 "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                 "cost_details": {"upstream_inference_cost": 0.000009},
                 "completion_tokens_details": {"reasoning_tokens": 0}}
        if not req.get("stream"):
            msg = {"role": "assistant", "content": text}
            if call:
                msg["tool_calls"] = [{"id": "call_" + secrets.token_hex(12), "type": "function",
                                      "function": {"name": call[0], "arguments": call[1]}}]
            body = dumps({"id": gen, "provider": "Lean", "model": model, "object": "chat.completion", "created": created,
                          "choices": [{"index": 0, "message": msg, "finish_reason": finish, "native_finish_reason": finish,
                                       "logprobs": None}], "usage": usage}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return

        def chunk(delta, finish_reason=None):
            return {"id": gen, "provider": "Lean", "model": model, "object": "chat.completion.chunk", "created": created,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason,
                                 "native_finish_reason": finish_reason, "logprobs": None}]}

        events = [chunk({"role": "assistant", "content": ""})]
        if call:
            cid = "call_" + secrets.token_hex(12)
            events.append(chunk({"role": "assistant", "content": None, "tool_calls": [
                {"index": 0, "id": cid, "type": "function", "function": {"name": call[0], "arguments": ""}}]}))
            args = call[1]
            half = len(args) // 2
            for frag in (args[:half], args[half:]):
                events.append(chunk({"role": "assistant", "content": None, "tool_calls": [
                    {"index": 0, "function": {"arguments": frag}}]}))
        else:
            for w in words(text):
                events.append(chunk({"role": "assistant", "content": w}))
        events.append(chunk({"role": "assistant", "content": ""}, finish))
        events.append({"id": gen, "provider": "Lean", "model": model, "object": "chat.completion.chunk",
                       "created": created, "choices": [], "usage": usage})

        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("X-Generation-Id", gen)
        self.end_headers()
        try:
            for i, ev in enumerate(events):
                if i > 0 and LATENCY > 0:
                    time.sleep(LATENCY)
                self.write_chunk(("data: " + dumps(ev) + "\n\n").encode())
            self.write_chunk(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def write_chunk(self, b):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(b), b))
        self.wfile.flush()


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 4096


def main():
    global LATENCY
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--latency-ms", type=float, default=0)
    a = ap.parse_args()
    LATENCY = a.latency_ms / 1000
    srv = Server(("127.0.0.1", a.port), Handler)
    print("lean model listening; base URL http://127.0.0.1:%d/v1" % srv.server_address[1], flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
