"""Cut a published OpenAPI spec down to the operations the gateway serves, keeping every
component they reach, unchanged. How `openai-chat.json` was made from OpenAI's spec:

    python tests/gateway/http/specs/prune_spec.py openapi.json openai-chat.json \\
        post:/chat/completions post:/completions post:/embeddings get:/models

(`openapi.json` of github.com/openai/openai-openapi, MIT licence; see SOURCES.md.)
"""

from __future__ import annotations

import json
import sys


def refs(node, found: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/"):
            found.add(ref)
        for value in node.values():
            refs(value, found)
    elif isinstance(node, list):
        for value in node:
            refs(value, found)


def prune(spec: dict, operations: list[str]) -> dict:
    paths: dict = {}
    for operation in operations:
        method, _, path = operation.partition(":")
        paths.setdefault(path, {})[method] = spec["paths"][path][method]
    wanted: set[str] = set()
    refs(paths, wanted)
    done: set[str] = set()
    while wanted - done:
        ref = (wanted - done).pop()
        done.add(ref)
        _, _, section, name = ref.split("/", 3)
        refs(spec["components"][section][name], wanted)
    components: dict = {}
    for ref in sorted(done):
        _, _, section, name = ref.split("/", 3)
        components.setdefault(section, {})[name] = spec["components"][section][name]
    components["securitySchemes"] = spec["components"].get("securitySchemes", {})
    dropped = ("paths", "components", "webhooks", "x-oaiMeta")  # webhooks: not served here
    head = {k: v for k, v in spec.items() if k not in dropped}
    return {**head, "paths": paths, "components": components}


if __name__ == "__main__":
    source, target, *wanted_operations = sys.argv[1:]
    with open(source) as f:
        pruned = prune(json.load(f), wanted_operations)
    with open(target, "w") as f:
        json.dump(pruned, f, indent=1)
        f.write("\n")
