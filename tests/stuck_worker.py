"""Run by test_lightning_integration: loader workers that stop for good (SIGSTOP) at a chosen moment, met
round after round by one process, which must then be able to exit.

Usage: `stuck_worker.py CASE ROUNDS`. `CASE`: `before_put` (two workers; sample 2 stops worker 1
while it fetches its first batch: nothing of it is in the result pipe, or on its way) or `after_put`
(one worker, which stops once its second batch has been written whole to the result pipe). Each round
iterates an epoch of a fresh loader (forked workers): the first batch, then, once the worker is seen
stopped, the rest with the iterator's timeout cut to `TIMEOUT` (the loader's own,
`HEALTHY_TIMEOUT`, bounds the waits for healthy workers, however busy the machine). So each round
meets its case whatever the timing: in `after_put` the main process unpickles a batch whose sender is
already stopped. It expects the loader's error naming the stopped worker, shuts the workers down, checks
that none is left and prints a line `round N SECONDS`. Each round starts with a line `stuck PID` (the
worker that stops). The last round leaves the error uncaught: the process ends with it (exit status 1)
only if nothing joins the stopped worker forever at exit.
"""

from __future__ import annotations

import gc
import multiprocessing.queues
import os
import re
import signal
import sys
import time

import torch

from varlen.batching.loader import VarLenLoader

#: the wait for a batch of a worker seen stopped (the iterator's timeout then)
TIMEOUT = 0.1
#: the loader's timeout: the wait for a batch of a healthy worker
HEALTHY_TIMEOUT = 20.0


#: in a worker: its result queue, kept at its first put (see `keep_results`)
RESULTS: list[multiprocessing.queues.Queue] = []


class StopsItsWorker(torch.utils.data.Dataset):
    """Sample 2 stops the worker that fetches it (SIGSTOP): a worker stuck for good before its put.

    It stops once its result queue's write lock is free: the workers share that lock, and a worker stopped
    while its feeder thread writes (its start-up acknowledgement, which the main process may have read
    already) holds it for good: the other workers' batches never come either."""

    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int) -> int:
        if i == 2:
            lock = RESULTS[0]._wlock
            lock.acquire()
            lock.release()
            os.kill(os.getpid(), signal.SIGSTOP)
        return i


def keep_results(worker_id: int) -> None:
    """worker_init_fn: keep this worker's result queue in `RESULTS` at its first put."""
    put = multiprocessing.queues.Queue.put

    def put_and_keep(queue, item, *args, **kwargs) -> None:
        RESULTS[:] = [queue]
        put(queue, item, *args, **kwargs)

    multiprocessing.queues.Queue.put = put_and_keep  # in this worker only (its forked copy of the class)


def two_tensors(samples: list[int]) -> dict[str, torch.Tensor]:
    """A batch of two tensors: what a loader packs into one shared buffer."""
    values = torch.tensor(samples)
    return {"index": values, "ids": values.view(-1, 1).repeat(1, 4)}


def stop_once_sent(worker_id: int) -> None:
    """worker_init_fn: this worker stops (SIGSTOP) once its second batch is in the result pipe, whole.

    The worker's result queue hands each message to a feeder thread that pickles and writes it; the put
    of batch 1 (`(1, (batch, worker, state))`) closes the queue and joins that thread, which returns
    once everything put is written."""
    put = multiprocessing.queues.Queue.put

    def put_then_stop(queue, item, *args, **kwargs) -> None:
        put(queue, item, *args, **kwargs)
        if item[0] == 1:
            queue.close()
            queue.join_thread()
            os.kill(os.getpid(), signal.SIGSTOP)

    multiprocessing.queues.Queue.put = put_then_stop  # in this worker only (its forked copy of the class)


def loader(case: str) -> VarLenLoader:
    """The case's loader (see the module docstring)."""
    if case == "before_put":
        dataset, workers, init = StopsItsWorker(), 2, keep_results
    else:
        dataset, workers, init = list(range(8)), 1, stop_once_sent
    return VarLenLoader(
        dataset,
        batch_size=2,
        num_workers=workers,
        collate_fn=two_tensors,
        worker_init_fn=init,
        timeout=HEALTHY_TIMEOUT,
        multiprocessing_context="fork",
    )


def wait_until_stopped(pid: int) -> None:
    """Return once process `pid` is stopped by a signal (state T), within `HEALTHY_TIMEOUT`."""
    deadline = time.monotonic() + HEALTHY_TIMEOUT
    while True:
        with open(f"/proc/{pid}/stat") as stat:
            if stat.read().rsplit(")", 1)[1].split()[0] == "T":
                return
        assert time.monotonic() < deadline, f"worker {pid} did not stop"
        time.sleep(0.002)


def meet(epoch, received: list) -> None:
    """Iterate `epoch` (appending its batches' indices to `received`) into its stopped worker."""
    received.append(next(epoch)["index"].tolist())
    wait_until_stopped(epoch._workers[-1].pid)
    epoch._timeout = TIMEOUT
    for batch in epoch:
        received.append(batch["index"].tolist())


def check(case: str, epoch, received: list, error: RuntimeError) -> None:
    """The error names the stopped worker, its pid and the timeout; the batches before it were received."""
    worker = epoch._workers[-1]
    wanted = rf"loader worker {len(epoch._workers) - 1} \(pid {worker.pid}\) gave no batch in {TIMEOUT:g} s"
    assert re.match(wanted + rf".*timeout \(now {TIMEOUT:g} s", str(error)), f"{case}: {error}"
    # after_put: the batch its sender wrote to the pipe before it stopped
    assert received == ([[0, 1]] if case == "before_put" else [[0, 1], [2, 3]]), received


def main(case: str, rounds: int) -> None:
    for number in range(1, rounds):
        start = time.monotonic()
        source = loader(case)
        epoch, received = iter(source), []
        print(f"stuck {epoch._workers[-1].pid}", flush=True)
        try:
            meet(epoch, received)
        except RuntimeError as error:
            check(case, epoch, received, error)
        else:
            raise AssertionError(f"{case}: the epoch ended without an error ({received})")
        source.shutdown_workers()
        assert not any(worker.is_alive() for worker in epoch._workers), "a worker outlived the shutdown"
        assert gc.get_freeze_count() == 0
        print(f"round {number} {time.monotonic() - start:.2f}", flush=True)
    epoch = iter(loader(case))
    print(f"stuck {epoch._workers[-1].pid}", flush=True)
    meet(epoch, [])  # the loader's error ends the process (exit status 1), if it can exit


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
