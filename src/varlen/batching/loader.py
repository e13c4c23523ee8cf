"""`VarLenLoader`: torchdata's resumable loader, with the two behaviours varlen relies on.

It overrides private methods of torchdata's multi-process iterator (`_reset`, `_next_data`,
`_try_put_index`, `_shutdown_workers`). Those can change in any release, so pyproject caps
torchdata at the newest version tested (`TESTED_TORCHDATA`), and `check_torchdata`
(run when the first multi-process iterator is built, and by the test suite) refuses a torchdata
whose private API differs, with a message that says so, instead of resuming wrongly.
"""

from __future__ import annotations

import atexit
import functools
import gc
import inspect
import multiprocessing
import multiprocessing.util
import os
import struct
import sys
import threading
import time
import warnings
from multiprocessing.reduction import ForkingPickler
from typing import Any

import torch
import torch.utils.data._utils as torch_loader_utils
from torchdata.stateful_dataloader import StatefulDataLoader
from torchdata.stateful_dataloader.stateful_dataloader import _StatefulMultiProcessingDataLoaderIter

from varlen import notices
from varlen.batching.transfer import PackingCollate, unpack

__all__ = ["TESTED_TORCHDATA", "VarLenLoader", "check_torchdata"]

#: torchdata releases whose private iterator API `VarLenLoader` was tested against
TESTED_TORCHDATA = ("0.10", "0.11")
#: seconds a shutdown waits for a worker that outlived torch's SIGTERM before it kills the worker (SIGKILL)
END_GRACE_S = 1.0
#: seconds an exiting worker waits for its result queue to write what was put (the pipe may be full)
FLUSH_S = 1.0
#: the private methods overridden or called, with the parameters they must take
_PRIVATE_API = {
    "_reset": ("self", "loader", "first_iter", "prime_prefetch"),
    "_next_data": ("self",),
    "_try_put_index": ("self",),
    "_shutdown_workers": ("self",),
    "__init__": ("self", "loader", "next_iter_state"),
}


@functools.cache
def check_torchdata() -> None:
    """Refuse a torchdata whose private iterator API differs from the one VarLenLoader overrides.

    Raises:
        RuntimeError: naming the method and both signatures, and the versions tested.
    """
    for name, wanted in _PRIVATE_API.items():
        method = getattr(_StatefulMultiProcessingDataLoaderIter, name, None)
        found = tuple(inspect.signature(method).parameters) if method is not None else None
        if found != wanted:
            import torchdata

            raise RuntimeError(
                f"torchdata {torchdata.__version__}: _StatefulMultiProcessingDataLoaderIter.{name} is {found}, "
                f"VarLenLoader expects {wanted} (tested with torchdata {', '.join(TESTED_TORCHDATA)}). "
                "Install a tested torchdata (pip install 'torchdata<0.12') or update varlen.batching.loader."
            )
    if "prime_prefetch" not in inspect.getsource(_StatefulMultiProcessingDataLoaderIter._reset):
        raise RuntimeError("torchdata's iterator no longer primes its prefetch in _reset; update VarLenLoader")


#: (num_workers, cores) a warning said in this process
_WORKERS_SAID: set[tuple[int, int]] = set()


class VarLenLoader(StatefulDataLoader):
    """A resumable loader whose workers are started with care for what varlen relies on.

    * The first batches of an epoch are requested from the sampler at the first `next()`,
      not when the iterator is created (torchdata, like torch, prefetches at creation). Lightning
      creates the first iterator of a run *before* it calls `set_epoch`, so with workers a
      resumed run would otherwise plan that epoch with the previous epoch's number.
    * Forked workers share the main process's memory until a garbage collector walks the
      inherited objects: it writes into each object's header, which copies the page, in the
      worker that walks it or, when the main process walks, once in the main process
      (~100 MiB of interpreter state; pytorch/pytorch#13246). So the collector is frozen
      (`gc.freeze`, as CPython's documentation advises before a fork) across the fork, which
      the workers keep for their lifetime, and in the main process while an epoch is being
      iterated: from its first batch to its end (an error, or the workers' shutdown), so nothing stays
      uncollectable between epochs or after a fit. A loop of your own that leaves an epoch
      early keeps that freeze until the next epoch starts or the workers stop: call
      `shutdown_workers` (Lightning shuts them down itself). Skipped when the application
      froze objects itself, or with `VarLenLoader.freeze_gc = False`.
    * A worker's batch reaches the main process as one shared buffer with its tensors in it
      (`varlen.batching.transfer`), not a shared-memory file per tensor: each file costs the
      main process a round trip to a thread of the busy worker. A batch's inputs are then
      views of that buffer, the rest (labels, indices) copies. Off with `VarLenLoader.pack_batches = False`.
    * A state saved with another number of workers is refused by name when it is loaded (torchdata's
      state is per worker; it would fail later on a bare assertion).
    * A spawned worker ends the way a forked one does (`os._exit` once its loop has returned),
      without the interpreter's finalisation: there, an extension library's threads or static
      objects can abort the process after its last batch, which the main process reports as a
      worker killed by a signal (seen once in CI; fork and forkserver workers never finalise).
    * A stuck worker cannot hang the main process past the loader's `timeout`
      (`_WorkerIterator`): the workers share tensors by name (`file_system`), so receiving a
      batch never waits on its worker, and a worker a timeout named, or any still alive after torch's
      SIGTERM (a stopped one ignores it), is killed at the shutdown and at the process's exit.
    """

    freeze_gc = True
    pack_batches = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        with warnings.catch_warnings():  # torchdata calls torch.set_vital, deprecated in torch: not the user's to fix
            warnings.filterwarnings("ignore", message=r".*set_vital.*deprecated.*")
            super().__init__(*args, **kwargs)

    def check_worker_number_rationality(self) -> None:
        """torch's check of `num_workers` against the cores (it speaks at each loader and iterator), said once
        a process, by varlen, with the setting to change."""
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        if self.num_workers <= cores or (self.num_workers, cores) in _WORKERS_SAID:
            return
        _WORKERS_SAID.add((self.num_workers, cores))
        notices.warn(
            f"varlen: num_workers={self.num_workers} loader workers share the {cores} cores this process may use: "
            f"they take turns and add memory; set the DataModule's num_workers to {cores} or fewer "
            "(varlen tune --config CONFIG measures which serves fastest)"
        )

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume from a state of this loader's number of workers (see the class docstring).

        Raises:
            ValueError: the state was saved by a loader with another `num_workers`, naming both.
        """
        saved = _saved_workers(state_dict)
        if saved is not None and saved != self.num_workers:
            raise ValueError(
                f"this loader state was saved with num_workers={saved}, this loader has {self.num_workers}: "
                f"resume with num_workers={saved} (the loader's state is per worker), or start the epoch afresh"
            )
        super().load_state_dict(state_dict)

    def shutdown_workers(self) -> None:
        """Stop the workers now (and release the main process's collector); the next `iter()` starts new ones."""
        if isinstance(self._iterator, _StatefulMultiProcessingDataLoaderIter):
            self._iterator._shutdown_workers()
        self._iterator = None

    def _get_iterator(self) -> _StatefulMultiProcessingDataLoaderIter:
        if self.num_workers == 0:
            return super()._get_iterator()
        check_torchdata()
        self.check_worker_number_rationality()  # what StatefulDataLoader does, with our iterator class
        if self._start_method() == "forkserver":
            self._preload_forkserver()
        held = _WorkerIterator.holders > 0  # frozen by an epoch in progress (e.g. validation within training)
        freeze = self.freeze_gc and self._forks_workers() and (held or gc.get_freeze_count() == 0)
        if freeze:
            gc.freeze()
        init, collate = self.worker_init_fn, self.collate_fn
        self.worker_init_fn = functools.partial(_start_worker, init, self._start_method() == "spawn", _manager())
        if self.pack_batches:
            self.collate_fn = PackingCollate(collate)  # what the workers run
        try:
            iterator = _WorkerIterator(self, self.next_iter_state, freeze)  # starts the workers
        finally:
            self.worker_init_fn, self.collate_fn = init, collate
            if freeze and not held:
                gc.unfreeze()
        self.next_iter_state = None
        return iterator

    def _start_method(self) -> str:
        context = self.multiprocessing_context
        if context is not None:
            return context.get_start_method()
        method = torch.multiprocessing.get_start_method(allow_none=True)
        return method or torch.multiprocessing.get_all_start_methods()[0]

    def _forks_workers(self) -> bool:
        return self._start_method() == "fork"

    def _preload_forkserver(self) -> None:
        """Have the fork server import torch and the modules of the dataset and collate when it starts,
        so each worker it forks starts with them imported (seconds per worker otherwise); a module
        the server cannot import is skipped by it."""
        objects = (self.dataset, self.collate_fn, self.batch_sampler)
        modules = {"torch", *(getattr(type(o), "__module__", None) for o in objects)}
        modules |= {getattr(self.collate_fn, "__module__", None)}
        modules -= {None, "__main__", "builtins"}
        multiprocessing.get_context("forkserver").set_forkserver_preload(sorted(modules))


def _saved_workers(state: dict[str, Any]) -> int | None:
    """The `num_workers` of the loader that saved `state` (None when the state does not say)."""
    snapshot = state.get("_snapshot") if state else None
    if isinstance(snapshot, dict):  # a multi-process iterator's state
        workers = snapshot.get("_main_snapshot", {}).get("_num_workers")
        return None if workers is None else int(workers)
    return 0 if state and "_num_yielded" in state else None


def _start_worker(worker_init_fn, spawned: bool, manager: tuple | None, worker_id: int) -> None:
    """Run in each worker at its start, before `worker_init_fn`: the worker shares tensors by name
    (`file_system`; the main process keeps its own strategy) through the main process's shared-memory
    manager (`_manager`; without one, torch's sharing stays); at its exit it waits up to
    `FLUSH_S` for its result queue to write what was put; a spawned worker then skips the
    interpreter's finalisation (multiprocessing has already flushed the streams and joined its threads
    when the exit handlers run).

    Under torch's default `file_descriptor` sharing the main process, unpickling a batch, asks a thread
    of the worker for each file's descriptor, with no timeout: a worker stopped once its batch was in the
    pipe hung the main process forever, the loader's `timeout` covering only the wait for the message.
    By name the main process opens the file itself. A file is unlinked when its last holder closes it;
    the sender holds one for the receiver from pickling to unpickling, so a file a killed worker held, or
    one of a message never read, stays until torch_shm_manager (in a session of its own: a signal to the
    loader's process group spares it) sees its last client leave, at the end of the main process. Hence
    the flush at exit, and the shutdown's unpickling of what is left in the pipe (`_drop_unread`)."""
    if manager is not None:
        torch.multiprocessing.set_sharing_strategy("file_system")
        _WORKER_MANAGER.append(torch.UntypedStorage._new_shared_filename_cpu(*manager))
    multiprocessing.util.Finalize(None, _flush_results, exitpriority=5)  # after the queues' close (10)
    if spawned:
        atexit.register(_exit_now)
    if worker_init_fn is not None:
        worker_init_fn(worker_id)


#: in a worker, the main process's anchor file opened: its manager is the worker's (see `_manager`)
_WORKER_MANAGER: list[torch.UntypedStorage] = []


@functools.cache
def _manager() -> tuple[bytes, bytes, int] | None:
    """The main process's shared-memory manager: a one-byte file shared by name, kept for the process's
    life, as `(manager, file, size)`, which a worker opens to join that manager. None off POSIX, or when
    torch_shm_manager cannot start (a warning says so): the workers then keep torch's sharing.

    A worker otherwise starts a torch_shm_manager of its own unless it inherited one (a forked worker),
    and the main process, once it opened a file of it, keeps it running until the main process ends: a
    spawned or forkserver worker would leave one process (and a socket in the main process) an epoch.
    The manager links libtorch: about 150 MB of private memory, once per main process."""
    if os.name != "posix":
        return None
    anchor = torch.UntypedStorage(1)
    try:
        shared = anchor._share_filename_cpu_()
    except RuntimeError as error:
        warnings.warn(
            f"torch_shm_manager did not start ({error}): loader workers keep torch's sharing of tensors by "
            "file descriptor, with which a worker stopped after its batch was sent hangs the main process "
            "past the loader's timeout",
            stacklevel=3,
        )
        return None
    _MAIN_ANCHOR.append(anchor)
    return shared


_MAIN_ANCHOR: list[torch.UntypedStorage] = []


def _flush_results(within: float = FLUSH_S) -> None:
    """At a worker's exit: wait up to `within` s for its queues' feeder threads to write what was put
    (torch's worker loop cancels that wait, for a pipe nobody reads): a batch pickled and not written
    would keep its shared-memory file until the main process ends."""
    deadline = time.monotonic() + within
    for thread in threading.enumerate():
        if thread.name == "QueueFeederThread":
            thread.join(max(0.0, deadline - time.monotonic()))


def _exit_now() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


class _WorkerIterator(_StatefulMultiProcessingDataLoaderIter):
    """torchdata's multi-process iterator, priming its prefetch at the first `next()`, holding the
    main process's collector frozen while an epoch is iterated, unpacking packed batches, and ending its
    workers in bounded time (`_shutdown_workers`, and at exit `_end_at_exit`)."""

    holders = 0  # iterators in the middle of an epoch, over all loaders

    def __init__(self, loader: VarLenLoader, next_iter_state: dict[str, Any] | None, freeze: bool) -> None:
        self._freeze, self._holds_gc, self._stuck = freeze, False, set()
        super().__init__(loader, next_iter_state)
        # at exit, before multiprocessing joins its children: end the workers if no shutdown has (it cancels this)
        self._at_exit = multiprocessing.util.Finalize(
            None, _end_at_exit, args=(self._workers, id(self), os.getpid()), exitpriority=0
        )

    def _reset(self, loader, first_iter: bool = False, prime_prefetch: bool = True) -> None:
        self._release_gc()  # a new epoch (persistent workers): hold again from its first batch
        super()._reset(loader, first_iter, prime_prefetch=False)
        self._prime_pending = prime_prefetch

    def _next_data(self):
        if self._freeze and not self._holds_gc:
            self._hold_gc()  # again after an error, when a loop goes on
        try:
            if self._prime_pending:
                self._prime_pending = False
                for _ in range(self._prefetch_factor * self._num_workers):
                    self._try_put_index()
            return unpack(super()._next_data())
        except BaseException as error:
            # the epoch's end, or an error (a worker's, a dead worker, ^C): nothing stays frozen
            self._release_gc()
            if isinstance(error, RuntimeError) and str(error).startswith("DataLoader timed out"):
                raise RuntimeError(self._timed_out()) from error
            raise

    def _timed_out(self) -> str:
        """Which worker gave no batch within the loader's `timeout`, and what to do about it; the worker is
        marked stuck (the shutdown kills it without waiting for it)."""
        worker = self._task_info.get(self._rcvd_idx, (None,))[0]
        pid = self._workers[worker].pid if worker is not None else None
        if worker is not None:
            self._stuck.add(worker)
        return (
            f"loader worker {worker} (pid {pid}) gave no batch in {self._timeout:g} s: it is stuck (stopped, "
            "deadlocked, waiting on a store) or its batches take that long; find it with py-spy dump --pid "
            f"{pid}, or raise the DataModule's timeout (now {self._timeout:g} s; 0 waits forever)"
        )

    def _shutdown_workers(self, _utils=torch_loader_utils) -> None:
        """torch's shutdown, bounded: a worker a timeout named is killed first (a stopped one would hold up
        torch's join for 5 s, then ignore its SIGTERM), any still alive after torch's SIGTERM and
        `END_GRACE_S` is killed, and the messages left in the pipe are unpickled and dropped."""
        exiting = _utils.python_exit_status is not False  # torch's shutdown does nothing then (None: modules emptied)
        if getattr(self, "_shutdown", True) or exiting:
            super()._shutdown_workers()
            self._release_gc()
            return
        # the pipe's read end, duplicated: with a pin-memory thread, torch's shutdown closes the queue's own
        unread = os.dup(self._worker_result_queue._reader.fileno())
        try:
            if self._stuck:
                self._untrack_workers()
                for worker in self._stuck:
                    self._workers[worker].kill()
            super()._shutdown_workers()
            self._untrack_workers()
            _end_workers(self._workers)
            if not any(worker.is_alive() for worker in self._workers):
                _drop_unread(unread)
            if hasattr(self, "_at_exit"):
                self._at_exit.cancel()
        finally:
            os.close(unread)
            self._release_gc()

    def _untrack_workers(self) -> None:
        """Stop torch's SIGCHLD check of these workers, which would raise for a worker ended here."""
        if self._worker_pids_set:
            torch_loader_utils.signal_handling._remove_worker_pids(id(self))
            self._worker_pids_set = False

    def _hold_gc(self) -> None:
        if _WorkerIterator.holders == 0 and gc.get_freeze_count() > 0:
            return  # the application froze objects itself: leave its freeze alone
        gc.freeze()
        _WorkerIterator.holders += 1
        self._holds_gc = True

    def _release_gc(self, _finalizing=sys.is_finalizing) -> None:
        """Drop this iterator's hold (the last one unfreezes). Not at interpreter exit: an iterator
        collected then may find the module's globals already None, so `sys` is bound here."""
        if getattr(self, "_holds_gc", False) and not _finalizing():
            self._holds_gc = False
            _WorkerIterator.holders -= 1
            if _WorkerIterator.holders == 0:
                gc.unfreeze()


def _end_workers(workers: list, grace: float = END_GRACE_S) -> None:
    """End `workers`: SIGTERM, then SIGKILL for any still alive `grace` s later (a stopped process
    ignores SIGTERM until it is continued, and a join of it never returns)."""
    alive = [worker for worker in workers if worker.is_alive()]
    for worker in alive:
        worker.terminate()
    deadline = time.monotonic() + grace
    for worker in alive:
        worker.join(max(0.0, deadline - time.monotonic()))
    for worker in alive:
        if worker.is_alive():
            worker.kill()
            worker.join(grace)


def _end_at_exit(workers: list, iterator: int, pid: int) -> None:
    """At the main process `pid`'s exit (multiprocessing's, before it joins its children; torch's shutdown
    does nothing then): end the workers of the iterator (its `id`) that no shutdown ended."""
    if os.getpid() != pid:
        return
    try:
        torch_loader_utils.signal_handling._remove_worker_pids(iterator)
    except (ValueError, RuntimeError):
        pass  # torch no longer watches them
    _end_workers(workers)


def _drop_unread(fd: int) -> None:
    """Unpickle and drop each whole message left in the result pipe (read end `fd`) once its writers are
    gone (a batch prefetched for an epoch left early): a batch's shared-memory file is unlinked when its
    receiver closes it, so unread it would last until the main process ends. Reads what is there without
    blocking (a killed writer may have left half a message, which stays), framed as
    `multiprocessing.connection` frames a message."""
    data = bytearray()
    os.set_blocking(fd, False)  # (the pipe's, shared with the queue's own read end)
    try:
        while chunk := os.read(fd, 1 << 16):
            data += chunk
    except BlockingIOError:
        pass
    finally:
        os.set_blocking(fd, True)
    at = 0
    while at + 4 <= len(data):
        (size,), head = struct.unpack_from("!i", data, at), 4
        if size == -1 and at + 12 <= len(data):
            (size,), head = struct.unpack_from("!Q", data, at + 4), 12
        if size < 0 or at + head + size > len(data):
            return
        try:
            ForkingPickler.loads(bytes(data[at + head : at + head + size]))
        except Exception:  # a message of a dead worker's descriptor: nothing to free
            pass
        at += head + size
