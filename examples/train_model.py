"""A long training job that survives its worker being killed.

It fits a small linear model with mini-batch gradient descent (pure Python, so it
runs anywhere), one epoch at a time, and checkpoints the weights after every epoch.
A retried or rescued attempt (the worker was SIGKILLed, the machine rebooted) reads
`ctx.last_checkpoint` and carries on from the last finished epoch instead of
starting over. Every epoch is deterministic (its shuffle is seeded by the epoch
number), so a resumed run ends with exactly the weights of an uninterrupted one.

Run it:

    cd examples
    export CONVEYOR_URL=sqlite:///train.db
    python train_model.py enqueue              # enqueue one training run
    conveyor worker train_model:app -p 2       # CPU-bound: processes, not threads
    conveyor jobs show <id>                    # progress: epoch n/N and the loss

Kill the worker mid-training (`kill -9`), start it again: the job resumes from the
last checkpointed epoch (its result says which).
"""

from __future__ import annotations

import os
import random
import sys
import time
from collections.abc import Callable
from typing import Any

from conveyor import Conveyor, current_job

app = Conveyor(os.environ.get("CONVEYOR_URL", "sqlite:///train.db"))

TRUE_WEIGHTS = (2.0, -3.0, 0.5)
TRUE_BIAS = 1.0


def dataset(samples: int = 256, seed: int = 7) -> list[tuple[list[float], float]]:
    rng = random.Random(seed)
    rows = []
    for _ in range(samples):
        x = [rng.uniform(-1, 1) for _ in TRUE_WEIGHTS]
        y = (
            sum(w * xi for w, xi in zip(TRUE_WEIGHTS, x, strict=True))
            + TRUE_BIAS
            + rng.gauss(0, 0.05)
        )
        rows.append((x, y))
    return rows


def run_epoch(
    state: dict[str, Any],
    epoch: int,
    data: list[tuple[list[float], float]],
    lr: float = 0.05,
    batch: int = 16,
) -> dict[str, Any]:
    """One pass over the data; a pure function of (state, epoch)."""
    weights, bias = list(state["weights"]), float(state["bias"])
    order = list(range(len(data)))
    random.Random(epoch).shuffle(order)
    for start in range(0, len(order), batch):
        rows = [data[i] for i in order[start : start + batch]]
        grad_w, grad_b = [0.0] * len(weights), 0.0
        for x, y in rows:
            error = sum(w * xi for w, xi in zip(weights, x, strict=True)) + bias - y
            grad_w = [g + error * xi for g, xi in zip(grad_w, x, strict=True)]
            grad_b += error
        weights = [w - lr * g / len(rows) for w, g in zip(weights, grad_w, strict=True)]
        bias -= lr * grad_b / len(rows)
    loss = sum(
        (sum(w * xi for w, xi in zip(weights, x, strict=True)) + bias - y) ** 2 for x, y in data
    ) / len(data)
    return {"epoch": epoch + 1, "weights": weights, "bias": bias, "loss": loss}


def train(
    epochs: int,
    state: dict[str, Any] | None = None,
    after_epoch: Callable[[dict[str, Any]], None] = lambda state: None,
    epoch_seconds: float = 0.0,
) -> dict[str, Any]:
    """Train from `state` (None: from scratch) to `epochs`; call `after_epoch` each epoch."""
    data = dataset()
    state = state or {"epoch": 0, "weights": [0.0] * len(TRUE_WEIGHTS), "bias": 0.0, "loss": None}
    while state["epoch"] < epochs:
        state = run_epoch(state, state["epoch"], data)
        if epoch_seconds:
            time.sleep(epoch_seconds)  # stands in for a heavier model
        after_epoch(state)
    return state


@app.task(name="train_model", max_attempts=10)
def train_model(epochs: int = 30, epoch_seconds: float = 0.0) -> dict[str, Any]:
    ctx = current_job()
    resumed_from = ctx.last_checkpoint["epoch"] if ctx.last_checkpoint else 0

    def checkpoint(state: dict[str, Any]) -> None:
        ctx.checkpoint(
            state,
            progress=state["epoch"] / epochs,
            message=f"epoch {state['epoch']}/{epochs}, loss {state['loss']:.5f}",
        )

    final = train(epochs, ctx.last_checkpoint, checkpoint, epoch_seconds)
    return {"resumed_from": resumed_from, "attempt": ctx.attempt, **final}


if __name__ == "__main__":
    if sys.argv[1:] == ["enqueue"]:
        handle = train_model.enqueue(epochs=30, epoch_seconds=0.5)
        print(f"enqueued training job {handle.id}")
    else:
        print(__doc__)
