"""A run's folder on disk: its metrics log (metrics.jsonl, and the same points' scalars in TensorBoard event
files beside it), its summary.json, files written whole or not at all, and the claim of the one run that
trains in it."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

CHECKPOINT_NAME = "checkpoint.pt"  # a run's state, which a resume continues from (`ddq.core.checkpoint`)
LOST_METRICS = "metrics.lost.jsonl"  # a killed session's points past the checkpoint its resume continued from

Writer = bytes | Callable[[BinaryIO], object]  # the bytes, or a function that writes to the open file it is given


def write_whole(path: str | Path, data: Writer) -> Path:
    """Writes `data` to `path` whole or not at all: into a temporary file beside it, flushed to disk, then
    renamed over `path` (a rename is atomic within a file system), and the folder's entry flushed too. A
    crash, a kill or a full disk leaves the previous file as it was, and no temporary file behind. A write
    that fails raises OSError naming `path`."""
    return write_together([(Path(path), data)])[0]


def write_together(files: list[tuple[Path, Writer]]) -> list[Path]:
    """Writes each (path, data) whole, and none unless every one was written: all go to temporary files
    first, then each is renamed over its path in order (a kill between two renames is the one moment that
    leaves one new beside one old; put last the file that says which others it goes with)."""
    written: list[tuple[str, Path]] = []
    try:
        for path, data in files:
            written.append((_write_temporary(path, data), path))
        for temporary, path in written:
            os.replace(temporary, path)
    except BaseException:
        for temporary, _ in written:
            Path(temporary).unlink(missing_ok=True)
        raise
    for folder in {path.parent for _, path in written}:
        _sync_folder(folder)
    return [path for _, path in written]


def _write_temporary(path: Path, data: Writer) -> str:
    """A temporary file beside `path` holding `data`, flushed to disk; OSError naming `path` if it fails."""
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(handle, 0o666 & ~_UMASK)  # mkstemp's file is its owner's alone: give it open()'s mode
        with os.fdopen(handle, "wb") as file:
            if isinstance(data, bytes):
                file.write(data)
            else:
                data(file)
            file.flush()
            os.fsync(file.fileno())
    except (OSError, RuntimeError) as error:  # torch.save reports a failed write as RuntimeError
        Path(temporary).unlink(missing_ok=True)
        raise cannot_write(path, error) from error
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return temporary


def cannot_write(path: str | Path, error: BaseException) -> OSError:
    """The user's one line for a write that failed (a full disk): the file and the reason, without "[Errno
    28]" before it."""
    reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error).splitlines()[0]
    failure = OSError(f"cannot write {path}: {reason}")
    failure.errno = getattr(error, "errno", None) or errno.EIO
    return failure


@contextlib.contextmanager
def _naming(path: str | Path) -> Iterator[None]:
    try:
        yield
    except OSError as error:
        raise cannot_write(path, error) from error


def _sync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):  # some network and FUSE file systems refuse to sync a folder
        handle = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(handle)
        finally:
            os.close(handle)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _umask()  # read once: umask can only be read by setting it


def plain(value: Any) -> Any:
    """`value`, or None for a float JSON cannot hold (NaN, infinities)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


# What TensorBoard plots of each kind of metrics point: the point's value, and the tag it is plotted under
# against the point's env steps. Staleness: downpour's, in updates between the weights a gradient was
# computed on and those it was applied to; policy lag: actor-learner's, in updates between the weights
# that played the experience and those trained on it.
SCALARS = {
    "episode": {"episode_return": "train/episode_return", "length": "train/episode_length"},
    "eval": {"mean_return": "eval/mean_return"},
    "train": {"loss": "train/loss", "epsilon": "train/epsilon", "mean_max_q": "train/mean_max_q",
              "env_steps_per_s": "speed/env_steps_per_s", "updates_per_s": "speed/updates_per_s",
              "staleness": "train/staleness", "policy_lag": "train/policy_lag"},
}
EVENTS_FLUSH_S = 5  # seconds an event waits in memory at most: TensorBoard shows a live run, a kill loses little
EVENT_FILES = "events.out.tfevents.*"  # TensorBoard's names for them


def _quiet_event_writer_threads() -> None:
    """TensorBoard's writer thread keeps a write that failed (a full disk) for the next write, flush or close
    to raise, where RunLog names the file in one line, and also raises it on its own thread: that thread's
    traceback is left unprinted. Other threads' go to the hook there was."""
    previous = threading.excepthook
    if getattr(previous, "quiets_event_writers", False):
        return

    def hook(args: threading.ExceptHookArgs) -> None:
        if not type(args.thread).__module__.startswith("tensorboard."):
            previous(args)

    hook.quiets_event_writers = True  # type: ignore[attr-defined]
    threading.excepthook = hook


def scalars(point: dict[str, Any], score: str | None = None) -> dict[str, float]:
    """The TensorBoard scalars of one metrics point, by tag: the values SCALARS names for its kind that are
    numbers (a missing or None value is no point), and an evaluation's mean count of rewarded steps by the
    name of the env's `score` where it counts them (Snake's `eval/mean_apples`)."""
    names = dict(SCALARS.get(point.get("kind", ""), {}))
    if score is not None and point.get("kind") == "eval":
        names["mean_rewarded_steps"] = f"eval/mean_{score}"
    return {tag: float(value) for key, tag in names.items()
            if isinstance(value := point.get(key), (int, float)) and not isinstance(value, bool)
            and math.isfinite(value)}


class RunLog:
    """Appends metric points to `run_dir/metrics.jsonl`, flushed so a dashboard can tail it, and their
    `scalars` to TensorBoard event files in `run_dir` (a file per session: a resumed run adds one).
    `score`: the name of the env's score where it counts rewarded steps (Snake's apples), else None.
    Only the driver's or the serial process writes it, as the context of the run: it is closed whatever ends
    the run, so no event is lost. A write that fails (a full disk) raises OSError naming the file."""

    def __init__(self, run_dir: str | Path, score: str | None = None, resumed_at: int | None = None):
        """`resumed_at`: the env steps of the checkpoint a resumed run counts on from. The points a session
        recorded past them, one that ended without a newer checkpoint (killed), are set aside (`set_aside_lost`),
        and TensorBoard hides that session's scalars past them (its `purge_step`): the curve had run on past
        them, then back."""
        from tensorboard.compat.proto.summary_pb2 import Summary
        from torch.utils.tensorboard import SummaryWriter  # here: the processes that only read a run never load it

        self.run_dir, self.score = Path(run_dir), score
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if resumed_at is not None and (lost := set_aside_lost(self.run_dir, resumed_at)):
            print(f"ddq: {lost:,} metrics points past the checkpoint's {resumed_at:,} env steps, where this session "
                  f"counts on from (a session recorded them, then ended without a newer checkpoint), moved to "
                  f"{LOST_METRICS}", file=sys.stderr, flush=True)
        self._file = open(self.run_dir / "metrics.jsonl", "a", encoding="utf-8")
        if self._file.tell() and not _ends_a_line(self.run_dir / "metrics.jsonl"):  # a killed run's torn point:
            self._file.write("\n")  # ended here, so that a resumed run's first point has a line of its own
        _quiet_event_writer_threads()
        self._events = SummaryWriter(str(self.run_dir), flush_secs=EVENTS_FLUSH_S,
                                     purge_step=None if resumed_at is None else resumed_at + 1)
        self._summary: Any = Summary
        self._event_file: Any = self._events.file_writer  # made with the SummaryWriter, dropped only by its close
        self._closed = False

    def write(self, kind: str, **values: Any) -> None:
        point = {"kind": kind, **{k: plain(v) for k, v in values.items()}}
        with _naming(self._file.name):
            self._file.write(json.dumps(point) + "\n")
            self._file.flush()
        if not (values_by_tag := scalars(point, self.score)):
            return
        # one event holding the point's scalars, as add_scalar writes each (simple values): an episode's two cost
        # 68 us, not 162 (a Breakout run logs 15,000 episodes, on the cores that train)
        summary = self._summary(value=[self._summary.Value(tag=tag, simple_value=value)
                                       for tag, value in values_by_tag.items()])
        with _naming(self.run_dir / EVENT_FILES):
            self._event_file.add_summary(summary, point.get("env_steps"))

    def write_summary(self, summary: dict[str, Any]) -> Path:
        return write_summary(self.run_dir, summary)

    def close(self) -> None:
        """Flushes and closes both, once."""
        if self._closed:
            return
        self._closed = True
        try:
            with _naming(self._file.name):
                self._file.close()
        finally:
            with _naming(self.run_dir / EVENT_FILES):
                self._events.close()

    def __enter__(self) -> RunLog:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, traceback: Any) -> None:
        """Closes the log. If that fails too (a full disk), the error that ended the run is the one told."""
        try:
            self.close()
        except OSError:
            if error is None:
                raise


def set_aside_lost(run_dir: Path, resumed_at: int) -> int:
    """Moves the points of `run_dir/metrics.jsonl` past `resumed_at` env steps to the end of LOST_METRICS beside
    it, and says how many: what a session recorded after the checkpoint a resume continues from, training that
    the checkpoint does not hold. Each file is written whole, the lost points first: a crash between the two
    writes leaves them in both, never in neither."""
    metrics = run_dir / "metrics.jsonl"
    if not metrics.exists():
        return 0
    kept: list[str] = []
    lost: list[str] = []
    for line in metrics.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True):
        point = _point(line) if line.strip() else None
        steps = point.get("env_steps") if point is not None else None
        past = isinstance(steps, int | float) and not isinstance(steps, bool) and steps > resumed_at
        (lost if past else kept).append(line if line.endswith("\n") else line + "\n")
    if lost:
        earlier = (run_dir / LOST_METRICS).read_text(encoding="utf-8") if (run_dir / LOST_METRICS).exists() else ""
        write_whole(run_dir / LOST_METRICS, (earlier + "".join(lost)).encode())
        write_whole(metrics, "".join(kept).encode())
    return len(lost)


def write_summary(run_dir: str | Path, summary: dict[str, Any]) -> Path:
    """`run_dir/summary.json`, written whole."""
    text = json.dumps({k: plain(v) for k, v in summary.items()}, indent=2) + "\n"
    return write_whole(Path(run_dir) / "summary.json", text.encode())


def has_checkpoint(run_dir: str | Path) -> bool:
    """Whether `run_dir` holds a run's checkpoint, which a resume continues from."""
    return (Path(run_dir) / CHECKPOINT_NAME).is_file()


def resumed_folder(resume: str | Path, run_dir: str | None, resume_flag: str, run_dir_flag: str) -> Path:
    """The folder a resume continues in: `resume` itself, or the folder of the checkpoint.pt it names. Refused
    in one line, before anything is read or moved: another file (a run's best.pt holds only its best
    evaluation's weights, and a resume from it had taken its older step count and set the run's newer points
    aside), and a `run_dir` other than that folder (a resumed run goes on where its checkpoint is; it had
    trained there and said nothing). The flags name the settings in those lines."""
    path = Path(resume)
    folder = path.parent if path.is_file() else path
    if path.is_file() and path.name != CHECKPOINT_NAME:
        raise ValueError(f"{resume_flag} {resume}: a run continues from its folder's {CHECKPOINT_NAME}, and this "
                         f"file is not one (a run's best.pt holds its best evaluation's weights, for ddq evaluate); "
                         f"give the run's folder: {resume_flag} {folder}")
    if run_dir is not None and Path(run_dir).resolve() != folder.resolve():
        raise ValueError(f"{run_dir_flag} {run_dir}: a resumed run goes on in its own folder, {folder}; leave "
                         f"{run_dir_flag} out (to train from its weights elsewhere, copy the folder first)")
    return folder


_claims: dict[Path, int] = {}  # this process's claimed run folders: the open folder each holds its lock on


def claim(run_dir: str | Path, named: str, instead: str) -> bool:
    """Makes `run_dir` and claims it for this run until `release`; whether it did (a file system that cannot
    lock folders is not locked). Refused, in one line (`named`: the folder as the user gave it; `instead`:
    what they may do), while another run trains there, in this process or another: two runs in one folder
    had mixed their points, checkpoints and summaries. The lock is the kernel's (flock), so it goes with the
    process however that ends, and it leaves no file."""
    folder = Path(run_dir).resolve()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle = os.open(folder, os.O_RDONLY)
    except OSError as error:
        raise cannot_write(run_dir, error) from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(handle)
        raise ValueError(f"{named}: another run is training in this folder now; wait for it to end {instead}") \
            from None
    except OSError:
        os.close(handle)
        return False
    _claims[folder] = handle
    return True


class FolderClaim:
    """One call's claim on a run folder (`claim`): tried at most once, and released only if it was taken."""

    def __init__(self) -> None:
        self.tried = False
        self.folder: str | Path | None = None

    def take(self, run_dir: str | Path, named: str, instead: str) -> None:
        if not self.tried:
            self.tried = True
            self.folder = run_dir if claim(run_dir, named, instead) else None

    def release(self) -> None:
        if self.folder is not None:
            release(self.folder)
            self.folder = None


def release(run_dir: str | Path) -> None:
    """Ends this process's claim on `run_dir` (`claim`), if it holds one."""
    handle = _claims.pop(Path(run_dir).resolve(), None)
    if handle is not None:
        os.close(handle)  # which releases the lock


def holds_a_run(run_dir: str | Path) -> bool:
    """Whether `run_dir` holds a run a new one would mix with: one that recorded a point or saved a checkpoint.
    A run that failed as it started (its Redis without TLS, say) recorded neither: its folder, logs kept, takes
    the corrected command's run, where it had been refused, and had nothing to resume either."""
    metrics = Path(run_dir) / "metrics.jsonl"
    return (metrics.exists() and metrics.stat().st_size > 0) or any(Path(run_dir).glob("*.pt"))


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every point of `run_dir/metrics.jsonl`, in order; a line cut short (its writer killed mid-write) is left
    out."""
    with open(Path(run_dir) / "metrics.jsonl", encoding="utf-8", errors="replace") as handle:
        return [point for line in handle if line.strip() and (point := _point(line)) is not None]


def _point(line: str) -> dict[str, Any] | None:
    try:
        point = json.loads(line)
    except ValueError:
        return None
    return point if isinstance(point, dict) else None


def _ends_a_line(path: Path) -> bool:
    with open(path, "rb") as handle:
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) == b"\n"
