"""Engine process hands its server a minimal environment (no key of the gateway's) plus
`process.env`, and its `model_attached` event shows the command with secrets masked."""

from __future__ import annotations

import json
import sys
import time

ENV_DUMP = """
import http.server, json, os, sys
with open(sys.argv[2], "w") as out:
    json.dump(dict(os.environ), out)


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
"""
GATEWAY_KEY = "gw-key-0123456789abcdef"
ADMIN_KEY = "admin-key-0123456789abcdef"
HF_TOKEN = "hf_token_0123456789abcdef"
CHILD_KEY = "sk-child-0123456789abcdef"


def test_the_child_gets_a_minimal_environment_and_its_command_is_masked(start_gateway, tmp_path):
    (tmp_path / "dump.py").write_text(ENV_DUMP)
    dump = tmp_path / "env.json"
    gateway = start_gateway(
        f"""
        server:
          api_keys: ["${{GATEWAY_API_KEY}}"]
          admin_key: "${{GATEWAY_ADMIN_KEY}}"
        models:
          - id: dumper
            engine: process
            process:
              command: [{sys.executable}, {tmp_path / "dump.py"}, "${{PORT}}", {dump},
                        --api-key, {CHILD_KEY}, "--token={CHILD_KEY}"]
              env: {{CHILD_SETTING: "on", CHILD_PORT: "${{PORT}}"}}
        """,
        env={
            "GATEWAY_API_KEY": GATEWAY_KEY,
            "GATEWAY_ADMIN_KEY": ADMIN_KEY,
            "HF_TOKEN": HF_TOKEN,
            "UNRELATED_VARIABLE": "x",
        },
    )
    deadline = time.monotonic() + 20
    while not dump.exists() or not dump.read_text():
        assert time.monotonic() < deadline, "the child never wrote its environment"
        time.sleep(0.1)
    environ = json.loads(dump.read_text())
    for value in (GATEWAY_KEY, ADMIN_KEY, HF_TOKEN):
        assert value not in json.dumps(environ)
    assert "UNRELATED_VARIABLE" not in environ
    assert environ["CHILD_SETTING"] == "on" and environ["CHILD_PORT"].isdigit()
    assert "PATH" in environ and "HOME" in environ
    attached = gateway.events("model_attached", model="dumper")
    command = attached[0]["detail"]["command"]
    assert CHILD_KEY not in command and "--api-key ***" in command
    assert "--token=***" in command and "env.json" in command
    assert CHILD_KEY not in gateway.log.read_text()
