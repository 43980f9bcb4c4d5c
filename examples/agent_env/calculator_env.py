#!/usr/bin/env python3
"""A reference environment server for furlong's agent episodes (docs/agents.md).

The task: the prompt asks for an arithmetic result (the sample's label is the right answer).
The environment offers one tool, `calculator`, whose argument `expression` is evaluated
(integers, + - * / and parentheses). An assistant turn with tool calls gets one tool message
per call back; a turn without tool calls is the final answer and ends the episode:

    reward = 1                 when the answer (its digits, signs and dots) equals the label
           = --call-reward     otherwise, when the episode made a well-formed calculator call
           = 0                 otherwise

--call-reward (default 0) is reward shaping for tiny models: it pays for learning to call the
tool at all. Standard library only; binds 127.0.0.1. With --port 0 the kernel picks the port;
the port is printed on the first line of stdout (and written to --port-file when given).

    python3 examples/agent_env/calculator_env.py --port 8765
    furlong train ... --agent-env-url http://127.0.0.1:8765
"""

import argparse
import ast
import json
import operator
import os
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
       ast.Div: operator.truediv}
MAX_DIGITS = 60  # results beyond this are refused (no giant numbers from "9**9**9"-like input)


def evaluate(expression):
    """The value of an arithmetic expression, or raises ValueError saying why not."""
    if len(expression) > 200:
        raise ValueError("expression too long")
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError:
        raise ValueError("not an arithmetic expression")

    def walk(node):
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            value = walk(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.BinOp) and type(node.op) in OPS:
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Div) and right == 0:
                raise ValueError("division by zero")
            value = OPS[type(node.op)](left, right)
            if len(str(value)) > MAX_DIGITS:
                raise ValueError("result too large")
            return value
        raise ValueError("only numbers, + - * / and parentheses are allowed")

    value = walk(tree)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value


def answer_of(content):
    """The number a final answer states: its digits, signs and dots, whitespace ignored."""
    return "".join(re.findall(r"[0-9.\-]", content))


class Episodes:
    """Episode state by id; a repeated (episode, turn) gets the answer it got the first time."""

    def __init__(self, call_reward):
        self.call_reward = call_reward
        self.lock = threading.Lock()
        self.episodes = {}
        self.next_id = 0
        self.done = []  # ids of episodes the env ended, oldest first

    KEEP_DONE = 4096

    def start(self, body):
        sample = body["sample"]
        with self.lock:
            self.next_id += 1
            episode_id = f"e{self.next_id}"
            self.episodes[episode_id] = {"label": str(sample.get("label") or ""), "called": False,
                                         "replies": {}}
        return {"episode_id": episode_id}

    def step(self, body):
        with self.lock:
            ep = self.episodes.get(body["episode_id"])
            if ep is None:
                return None
            turn = body["turn"]
            if turn in ep["replies"]:
                return ep["replies"][turn]
            reply = self._step(ep, body["message"])
            ep["replies"][turn] = reply
            if reply["done"]:  # kept for repeats of its last step, a bounded number of them
                self.done.append(body["episode_id"])
                if len(self.done) > self.KEEP_DONE:
                    self.episodes.pop(self.done.pop(0), None)
            return reply

    def _step(self, ep, message):
        calls = message.get("tool_calls") or []
        if not calls:
            right = ep["label"] != "" and answer_of(message.get("content", "")) == ep["label"]
            reward = 1.0 if right else (self.call_reward if ep["called"] else 0.0)
            return {"observation": [], "reward": reward, "done": True}
        observation = []
        for call in calls:
            expression = call.get("arguments", {}).get("expression")
            if call.get("name") != "calculator" or not isinstance(expression, str):
                content = "error: the only tool is calculator(expression: string)"
            else:
                ep["called"] = True
                try:
                    content = str(evaluate(expression))
                except ValueError as e:
                    content = f"error: {e}"
            observation.append({"role": "tool", "content": content})
        return {"observation": observation, "reward": None, "done": False}

    def finish(self, body):
        """furlong ended the episode (turn limit, token budget, abort): the shaping reward."""
        with self.lock:
            ep = self.episodes.pop(body["episode_id"], None)
        if ep is None:
            return {"reward": None}
        return {"reward": self.call_reward if ep["called"] else 0.0}


def make_handler(episodes):
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            try:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length))
            except (ValueError, json.JSONDecodeError):
                return self._send(400, {"error": "the body must be JSON"})
            routes = {"/start": episodes.start, "/step": episodes.step,
                      "/finish": episodes.finish}
            route = routes.get(self.path)
            if route is None:
                return self._send(404, {"error": f"no endpoint {self.path}"})
            try:
                reply = route(body)
            except (KeyError, TypeError, AttributeError) as e:
                return self._send(400, {"error": f"malformed request: {e!r}"})
            if reply is None:
                return self._send(404, {"error": "no such episode"})
            self._send(200, reply)

        def _send(self, status, payload):
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):  # quiet: one line per request would flood a run's log
            pass

    return Handler


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free)")
    parser.add_argument("--port-file", help="also write the port here (atomically)")
    parser.add_argument("--call-reward", type=float, default=0.0,
                        help="reward of an episode that called the calculator but did not "
                             "answer right (shaping; default 0)")
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(Episodes(args.call_reward)))
    server.daemon_threads = True
    port = server.server_address[1]
    print(port, flush=True)
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{port}\n")
        os.replace(tmp, args.port_file)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
