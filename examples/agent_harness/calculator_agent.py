#!/usr/bin/env python3
"""An example agent harness for `furlong train --agent-harness-url`: a tool-using agent with a
calculator tool, written against the unmodified `openai` package.

furlong POSTs one task per rollout sample to this server:

  {"session_id": "s7", "base_url": "http://127.0.0.1:PORT/sessions/s7/v1", "api_key": "fl-...",
   "model": "...", "seed": 123, "sample": {"index", "group_index", "prompt", "label", "metadata"}}

The agent talks to the policy through `openai.OpenAI(base_url=..., api_key=...)` and its
chat.completions API, with the calculator in `tools`: it sends the conversation, runs the tool
calls the model makes, appends their results as tool messages and asks again, until the model
answers without a call or --max-turns turns were taken (or furlong ends the session: a 400 whose
type is "session_ended"). It then answers the POST with

  {"reward": float | null, "metrics": {"tool_calls": n, "turns": n, "sessions_at_once": n}}

(sessions_at_once: the sessions this server was running when the task arrived, itself included).

Rewards (--reward): "answer" pays 1 when the final answer contains the sample's label; "call"
pays 1 when the session made a calculator call (what furlong's tiny e2e model can learn). With
--nudge TEXT, an answer without a call before the last turn gets TEXT as a user message and the
model is asked again.

Switches for tests: --record DIR writes each session's final conversation to
DIR/<sample index>.json; --fault crash (the connection closes without an answer, after one
model call), hang (no answer), no-reward (reward null), bad-reward (a reward that is not a
number) or edit-history (the first assistant message is changed before the second call, so the
history diverges); with --fault-every N only every N-th task has it.

    python3 examples/agent_harness/calculator_agent.py --port 8100
    furlong train ... --agent-harness-url http://127.0.0.1:8100
"""

import argparse
import ast
import itertools
import json
import operator
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import openai

CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluates an arithmetic expression",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    },
}

OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
             ast.Div: operator.truediv, ast.USub: operator.neg}


def evaluate(expression):
    """The value of +, -, *, / over numbers, or an error text (never raises)."""
    def walk(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
            return OPERATORS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in OPERATORS:
            return OPERATORS[type(node.op)](walk(node.operand))
        raise ValueError("not arithmetic")
    try:
        return str(walk(ast.parse(expression, mode="eval").body))
    except Exception:  # noqa: BLE001 - any bad expression is the tool's error message
        return "error: not an arithmetic expression"


def calculator_result(call):
    try:
        args = json.loads(call.function.arguments)
    except ValueError:
        return "error: arguments are not JSON"
    if call.function.name != "calculator" or not isinstance(args, dict):
        return "error: unknown tool"
    return evaluate(str(args.get("expression", "")))


def run_agent(task, args, fault):
    """One session; returns the answer to the task's POST (None: crash after one call)."""
    client = openai.OpenAI(base_url=task["base_url"], api_key=task["api_key"], max_retries=0,
                           timeout=args.request_timeout)
    sample = task["sample"]
    prompt = sample["prompt"]
    messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
    tools = [CALCULATOR]
    calls, turns, answer = 0, 0, ""
    for turn in range(args.max_turns):
        if fault == "edit-history" and turn == 1:
            messages[-2]["content"] = "I will use the calculator."
        try:
            response = client.chat.completions.create(model=task["model"], messages=messages,
                                                      tools=tools, logprobs=True)
        except openai.BadRequestError as e:
            if e.type == "session_ended":
                break  # a limit ended the session: report what we have
            raise
        turns += 1
        if fault == "crash":
            return None
        message = response.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            answer = message.content or ""
            if args.nudge is None or turn + 1 == args.max_turns:
                break
            messages.append({"role": "user", "content": args.nudge})
            continue
        for call in message.tool_calls:
            calls += 1
            messages.append({"role": "tool", "tool_call_id": call.id,
                             "content": calculator_result(call)})
    if args.record:
        with open(os.path.join(args.record, f"{sample['index']}.json"), "w") as f:
            json.dump({"messages": messages, "tools": tools}, f)
    if args.reward == "call":
        reward = 1.0 if calls > 0 else 0.0
    else:
        label = sample.get("label")
        reward = 1.0 if label and str(label) in answer else 0.0
    if fault == "no-reward":
        reward = None
    if fault == "bad-reward":
        reward = "high"
    return {"reward": reward, "metrics": {"tool_calls": calls, "turns": turns}}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    counter = itertools.count(1)
    lock = threading.Lock()
    active = 0  # sessions being run now

    def log_message(self, *a):
        pass

    def do_POST(self):
        task = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        args = self.server.args
        with Handler.lock:
            n = next(Handler.counter)
            Handler.active += 1
            at_once = Handler.active
        fault = args.fault if args.fault and n % args.fault_every == 0 else None
        status = 200
        try:
            if fault == "hang":
                time.sleep(3600)
            result = run_agent(task, args, fault)
            if result is not None:
                result["metrics"]["sessions_at_once"] = at_once
        except Exception as e:  # noqa: BLE001 - the harness's failure is furlong's to count
            status, result = 500, {"error": f"{type(e).__name__}: {e}"}
        finally:
            with Handler.lock:
                Handler.active -= 1
        if result is None:  # crash: no answer at all
            self.close_connection = True
            return
        body = json.dumps(result).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, default=8100)
    ap.add_argument("--port-file", help="write the bound port here (after binding)")
    ap.add_argument("--max-turns", type=int, default=4)
    ap.add_argument("--reward", choices=["answer", "call"], default="answer")
    ap.add_argument("--nudge", help="a user message that answers a turn without a tool call")
    ap.add_argument("--request-timeout", type=float, default=300.0)
    ap.add_argument("--record", help="a directory: each session's final conversation goes there")
    ap.add_argument("--fault", choices=["crash", "hang", "no-reward", "bad-reward",
                                        "edit-history"])
    ap.add_argument("--fault-every", type=int, default=1)
    args = ap.parse_args()
    # A listen backlog for a rollout's worth of sessions arriving at once (the default is 5).
    ThreadingHTTPServer.request_queue_size = 256
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    server.args = args
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{server.server_address[1]}\n")
        os.replace(tmp, args.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
