"""Makes what the fuzzed operations that take an id need, on the server scripts/fuzz-api.sh
started: a task, an evaluation batch, a rollout batch, a tenant, two episodes (one with no
turn yet, one whose first turn is posted) and a KernelGYM task id (stdlib only; the admin token
in $CRUCIBLE_FUZZ_TOKEN). Prints Schemathesis ``[[operations]]`` tables that give each such
operation a real id, so it is fuzzed past the 404 of an unknown one: its query parameters,
cancelling (200, then 409) and deleting (200, then 404)."""

from __future__ import annotations

import json
import os
import sys
import urllib.request

REFERENCE = (
    "import torch\n\nclass Model(torch.nn.Module):\n"
    "    def forward(self, x):\n        return x + 1\n\n"
    "def get_inputs():\n    return [torch.randn(8)]\n\n"
    "def get_init_inputs():\n    return []\n"
)


def kernel(n: int) -> str:
    return (
        "import torch\n\nclass ModelNew(torch.nn.Module):\n"
        f"    def forward(self, x):\n        return x + {n}\n"
    )


def post(url: str, path: str, body: dict) -> dict:
    request = urllib.request.Request(
        url + path,
        data=json.dumps(body).encode(),
        method="POST",
        headers={
            "content-type": "application/json",
            "authorization": f"Bearer {os.environ['CRUCIBLE_FUZZ_TOKEN']}",
        },
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.load(answer)


def operation(path: str, parameters: dict[str, object]) -> str:
    values = ", ".join(f'"path.{k}" = {json.dumps(v)}' for k, v in parameters.items())
    return f'\n[[operations]]\ninclude-path = "{path}"\nparameters = {{ {values} }}\n'


def main(url: str) -> None:
    task = post(url, "/evaluate", {"reference_code": REFERENCE, "kernel_code": kernel(1)})
    batch = post(
        url, "/evaluate/batch", {"tasks": [{"reference_code": REFERENCE, "kernel_code": kernel(2)}]}
    )
    rollouts = post(
        url,
        "/rollouts",
        {
            "rollouts": [
                {"id": "no-kernel", "reference_code": REFERENCE, "completion": "no code here"},
                {
                    "id": "kernel",
                    "problem": {"level": 1, "id": 1},
                    "completion": f"```python\n{kernel(3)}```",
                },
            ]
        },
    )
    tenant = post(url, "/admin/tenants", {"name": "fuzz-tenant"})["tenant"]
    # Posting turns needs an episode whose next turn is open; reading a turn, one posted.
    fresh = post(url, "/episodes", {"reference_code": REFERENCE})
    posted = post(url, "/episodes", {"reference_code": REFERENCE})
    post(
        url,
        f"/episodes/{posted['episode_id']}/turns",
        {"completion": f"<KERNEL>\n```python\n{kernel(4)}```"},
    )
    # KernelGYM's client names its tasks; `?wait=0` answers at once (no worker runs it).
    named = post(url, "/kernelgym/evaluate?wait=0", {
        "task_id": "fuzz-kernelgym", "reference_code": REFERENCE, "kernel_code": kernel(5)})
    print(operation("/tasks/{id}", {"id": task["task_id"]}), end="")
    print(operation("/kernelgym/status/{task_id}", {"task_id": named["task_id"]}), end="")
    print(operation("/kernelgym/results/{task_id}", {"task_id": named["task_id"]}), end="")
    print(operation("/batches/{id}", {"id": batch["batch_id"]}), end="")
    print(operation("/batches/{id}/results", {"id": rollouts["batch_id"]}), end="")
    print(operation("/problems/{level}/{id}", {"level": 1, "id": 1}), end="")
    print(operation("/admin/tenants/{name}", {"name": tenant["name"]}), end="")
    print(operation("/episodes/{id}", {"id": posted["episode_id"]}), end="")
    print(operation("/episodes/{id}/turns", {"id": fresh["episode_id"]}), end="")
    print(
        operation("/episodes/{id}/turns/{turn}", {"id": posted["episode_id"], "turn": 0}), end=""
    )


if __name__ == "__main__":
    main(sys.argv[1])
