#!/usr/bin/env python3
"""An example environment in the OpenEnv shape, for `furlong train --agent-env-protocol openenv`.

It speaks OpenEnv's wire protocol (the shapes of the `openenv-core` package's FastAPI server)
with the Python standard library only:

  GET  /health           {"status": "healthy"}
  GET  /schema           {"action": ..., "observation": ..., "state": ...} (JSON schemas)
  GET  /metadata         {"name", "description", "version", ...}
  POST /reset            {"seed"?, "episode_id"?} -> {"observation", "reward", "done"}
  POST /step             {"action": {"message": str}, "episode_id"?} -> the same shape
  GET  /state            {"episode_id", "step_count"}
  WS   /ws               one session (its own environment) per connection; the client sends
                         {"type": "reset"|"step"|"state"|"close", "data": {...}} and gets
                         {"type": "observation"|"state", "data": ...} or
                         {"type": "error", "data": {"message", "code"}}

OpenEnv's own server makes a fresh environment for every HTTP call, so over HTTP an episode has
no state between /reset and /step there. This server keeps HTTP episodes by "episode_id" (given
at /reset, sent again with each /step), which is what furlong's openenv-http protocol does.

The task: reset(seed) draws two numbers from random.Random(seed) and asks for their sum; the
observation is {"prompt": str, "attempts_left": int}. A step's action {"message": text} is an
answer: the last number in the text is compared with the sum. Right: reward 1, done. Wrong:
reward 0, and either done (no attempts left) or an observation saying so. With --task threshold
the prompt is "a+b=" with digits 0..9 and the right answer is "1" when a + b >= 5, else "0" (the
tiny task of furlong's tests).

Fault switches for tests: --fault close-on-step (the WebSocket closes at the first step),
error-on-step (an error message answers it), hang-on-step (no answer), oversized-on-step (a
9 MiB answer), bad-length-on-step (a frame claiming 2^64 - 2 bytes); with --fault-every N
only every N-th WebSocket session has the fault. --ping-interval S pings each WebSocket session
every S seconds and drops it when the previous ping is still unanswered (as uvicorn does).

    python3 examples/openenv/sum_env.py --port 8000
    furlong train ... --agent-env-url http://127.0.0.1:8000 --agent-env-protocol openenv \\
        --agent-env-observation-key prompt
"""

import argparse
import base64
import hashlib
import json
import random
import re
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
MAX_MESSAGE = 1 << 20


class SumEnv:
    """One episode's environment (OpenEnv's Environment: reset, step, state)."""

    def __init__(self, task, attempts):
        self.task, self.attempts = task, attempts
        self.episode_id, self.step_count = None, 0
        self.answer, self.left = None, 0

    def reset(self, seed=None, episode_id=None, **_):
        rng = random.Random(seed)
        if self.task == "threshold":
            a, b = rng.randint(0, 9), rng.randint(0, 9)
            prompt, self.answer = f"{a}+{b}=", ("1" if a + b >= 5 else "0")
        else:
            a, b = rng.randint(10, 99), rng.randint(10, 99)
            prompt, self.answer = f"What is {a} + {b}? Reply with the number.", str(a + b)
        self.episode_id, self.step_count, self.left = episode_id, 0, self.attempts
        return {"observation": {"prompt": prompt, "attempts_left": self.left}, "reward": 0.0,
                "done": False}

    def step(self, action):
        if self.answer is None:
            raise ValueError("step before reset")
        message = action.get("message") if isinstance(action, dict) else None
        if not isinstance(message, str) or set(action) != {"message"}:
            raise ValueError('the action must be {"message": str}')
        self.step_count += 1
        self.left -= 1
        numbers = re.findall(r"-?\d+", message)
        right = bool(numbers) and numbers[-1] == self.answer
        done = right or self.left <= 0
        text = "right" if right else f"wrong, {self.left} attempt(s) left"
        return {"observation": {"prompt": text, "attempts_left": self.left},
                "reward": 1.0 if right else 0.0, "done": done}

    def state(self):
        return {"episode_id": self.episode_id, "step_count": self.step_count}


SCHEMA = {
    "action": {"type": "object", "properties": {"message": {"type": "string"}},
               "required": ["message"], "additionalProperties": False},
    "observation": {"type": "object", "properties": {"prompt": {"type": "string"},
                                                     "attempts_left": {"type": "integer"}}},
    "state": {"type": "object", "properties": {"episode_id": {"type": ["string", "null"]},
                                               "step_count": {"type": "integer"}}},
}


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # a trainer opens many connections at once

    def __init__(self, address, args):
        super().__init__(address, Handler)
        self.args = args
        self.lock = threading.Lock()
        self.http_episodes = {}  # episode_id -> SumEnv (HTTP form)
        self.sessions = 0        # open WebSocket sessions
        self.opened = 0          # WebSocket sessions so far (for --fault-every)

    def new_env(self):
        return SumEnv(self.args.task, self.args.attempts)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *_):
        pass

    def reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n > MAX_MESSAGE:
            raise ValueError("body too large")
        return json.loads(self.rfile.read(n) or b"{}") if n else {}

    def do_GET(self):
        if self.path == "/ws":
            return self.websocket()
        if self.path == "/health":
            return self.reply(200, {"status": "healthy"})
        if self.path == "/schema":
            return self.reply(200, SCHEMA)
        if self.path == "/metadata":
            return self.reply(200, {"name": "SumEnv", "description": "sums of two numbers",
                                    "version": "1.0.0", "author": "furlong examples",
                                    "readme_content": None, "documentation_url": None})
        if self.path == "/state":
            return self.reply(200, {"episode_id": None, "step_count": 0})
        self.reply(404, {"detail": "Not Found"})

    def do_POST(self):
        srv = self.server
        try:
            req = self.body()
        except ValueError as e:
            return self.reply(422, {"detail": [{"msg": str(e)}]})
        if self.path == "/reset":
            env = srv.new_env()
            result = env.reset(**{k: v for k, v in req.items() if k in ("seed", "episode_id")})
            if req.get("episode_id"):
                with srv.lock:
                    srv.http_episodes[req["episode_id"]] = env
                    while len(srv.http_episodes) > 10000:  # episodes that never ended
                        srv.http_episodes.pop(next(iter(srv.http_episodes)))
            return self.reply(200, result)
        if self.path == "/step":
            if not isinstance(req.get("action"), dict):
                return self.reply(422, {"detail": [{"loc": ["body", "action"],
                                                    "msg": "Field required"}]})
            with srv.lock:
                env = srv.http_episodes.get(req.get("episode_id"))
            if env is None:
                env = srv.new_env()  # as OpenEnv's server: a fresh environment
            try:
                result = env.step(req["action"])
            except ValueError as e:
                return self.reply(422, {"detail": [{"msg": str(e)}]})
            if result["done"]:
                with srv.lock:
                    srv.http_episodes.pop(req.get("episode_id"), None)
            return self.reply(200, result)
        self.reply(404, {"detail": "Not Found"})

    # --- WebSocket (RFC 6455), server side ---

    def websocket(self):
        key = self.headers.get("Sec-WebSocket-Key")
        if self.headers.get("Upgrade", "").lower() != "websocket" or not key:
            return self.reply(400, {"detail": "expected a WebSocket upgrade"})
        accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        self.wlock = threading.Lock()  # the pinger writes too
        srv = self.server
        with srv.lock:
            full = srv.sessions >= srv.args.max_sessions
            if not full:
                srv.sessions += 1
                srv.opened += 1
                faulty = srv.args.fault and srv.opened % srv.args.fault_every == 0
        if full:
            self.ws_send({"type": "error", "data": {
                "message": "Server at capacity", "code": "CAPACITY_REACHED",
                "active_sessions": srv.sessions, "max_sessions": srv.args.max_sessions}})
            return self.ws_close()
        self.last_ping, self.last_pong, self.ended = None, None, False
        if srv.args.ping_interval:
            threading.Thread(target=self.ws_pinger, daemon=True).start()
        try:
            self.ws_session(srv.new_env(), srv.args.fault if faulty else None)
        finally:
            self.ended = True
            with srv.lock:
                srv.sessions -= 1

    def ws_session(self, env, fault):
        while True:
            text = self.ws_receive()
            if text is None:
                return
            try:
                msg = json.loads(text)
            except ValueError:
                self.ws_error("Invalid JSON", "INVALID_JSON")
                continue
            kind = msg.get("type") if isinstance(msg, dict) else None
            data = msg.get("data", {}) if isinstance(msg, dict) else {}
            if kind == "close":
                return self.ws_close()
            if kind == "state":
                self.ws_send({"type": "state", "data": env.state()})
            elif kind == "reset":
                kwargs = data if isinstance(data, dict) else {}
                self.ws_send({"type": "observation", "data": env.reset(**kwargs)})
            elif kind == "step":
                if fault == "close-on-step":
                    return self.ws_close()
                if fault == "hang-on-step":
                    time.sleep(3600)
                if fault == "error-on-step":
                    self.ws_error("the env refused the step", "EXECUTION_ERROR")
                    continue
                if fault == "oversized-on-step":  # a 9 MiB observation
                    self.ws_send({"type": "observation", "data": {
                        "observation": {"prompt": "x" * (9 << 20)}, "reward": 0.0,
                        "done": False}})
                    continue
                if fault == "bad-length-on-step":  # a fragment, then a 2^64 - 2 byte one
                    with self.wlock:
                        self.wfile.write(bytes([0x01, 2]) + b"ab" + bytes([0x80, 127]) +
                                         b"\xff" * 7 + b"\xfe")
                        self.wfile.flush()
                    time.sleep(3600)
                try:
                    self.ws_send({"type": "observation", "data": env.step(data)})
                except ValueError as e:
                    self.ws_error(str(e), "EXECUTION_ERROR")
            else:
                self.ws_error(f"Unknown message type: {kind}", "UNKNOWN_TYPE")

    def ws_pinger(self):
        import socket
        while not self.ended:
            time.sleep(self.server.args.ping_interval)
            if self.ended:
                return
            if self.last_ping is not None and (self.last_pong or 0) < self.last_ping:
                self.connection.shutdown(socket.SHUT_RDWR)  # the client missed a ping
                return
            self.last_ping = time.monotonic()
            try:
                self.ws_send(b"keepalive", opcode=0x9)
            except OSError:
                return

    def ws_error(self, message, code):
        self.ws_send({"type": "error", "data": {"message": message, "code": code}})

    def ws_send(self, obj, opcode=0x1):
        payload = json.dumps(obj).encode() if opcode == 0x1 else obj
        n = len(payload)
        head = bytes([0x80 | opcode])
        if n < 126:
            head += bytes([n])
        elif n < 65536:
            head += bytes([126]) + struct.pack(">H", n)
        else:
            head += bytes([127]) + struct.pack(">Q", n)
        with self.wlock:
            self.wfile.write(head + payload)
            self.wfile.flush()

    def ws_close(self):
        try:
            self.ws_send(struct.pack(">H", 1000), opcode=0x8)
        except OSError:
            pass

    def ws_receive(self):
        """One whole text message from the client, or None when the connection ended."""
        message = b""
        while True:
            head = self.rfile.read(2)
            if len(head) < 2:
                return None
            fin, opcode = head[0] & 0x80, head[0] & 0x0F
            masked, n = head[1] & 0x80, head[1] & 0x7F
            if n == 126:
                n = struct.unpack(">H", self.rfile.read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self.rfile.read(8))[0]
            if not masked or n > MAX_MESSAGE:
                return None  # clients must mask; oversized messages end the session
            mask = self.rfile.read(4)
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(self.rfile.read(n)))
            if opcode == 0x8:
                return None
            if opcode == 0x9:
                self.ws_send(data, opcode=0xA)
                continue
            if opcode == 0xA:
                self.last_pong = time.monotonic()
                continue
            if opcode in (0x1, 0x0):
                message += data
                if fin:
                    return message.decode("utf-8", "replace")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--port-file", help="write the bound port here (after binding)")
    ap.add_argument("--task", choices=["sum", "threshold"], default="sum")
    ap.add_argument("--attempts", type=int, default=1, help="steps an episode may take")
    ap.add_argument("--max-sessions", type=int, default=64, help="WebSocket sessions at once")
    ap.add_argument("--fault", choices=["close-on-step", "error-on-step", "hang-on-step",
                                        "oversized-on-step", "bad-length-on-step"])
    ap.add_argument("--fault-every", type=int, default=1, help="the fault hits every N-th session")
    ap.add_argument("--ping-interval", type=float, default=0,
                    help="seconds between pings of a WebSocket session (0: none)")
    args = ap.parse_args()
    server = Server(("127.0.0.1", args.port), args)
    port = server.server_address[1]
    print(port, flush=True)
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{port}\n")
        import os
        os.replace(tmp, args.port_file)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
