"""A run folder on a full disk (issue 40's defects 4 and 10): a small tmpfs of the test's own is the run folder.
The run ends with one line that names the file it could not write, and the checkpoint it wrote before is
still whole: it loads, and a resume from it, once there is room, finishes the budget. Needs root (mount)."""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from conftest import run_ddq, summary_of

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")

TRAIN = ("train", "--mode", "serial", "--env", "CartPole-v1", "--algo", "dqn", "--seed", "5", "--no-progress",
         "--checkpoint-every", "1000", "--eval-every", "1000", "--eval-episodes", "2")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB tmpfs, unmounted at the end."""
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,mode=0700", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "--lazy", str(disk)], check=False)


def fill(disk: Path, leave: int) -> Path:
    """A file that takes all of `disk`'s free space but `leave` bytes."""
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    filler = disk / "filler"
    with open(filler, "wb") as file:
        block = b"\0" * 2**20
        for _ in range(max(free - leave, 0) // len(block)):
            file.write(block)
        file.write(b"\0" * ((max(free - leave, 0)) % len(block)))
    return filler


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_full_disk_ends_the_run_with_one_line_and_leaves_the_checkpoint_before_it_whole(small_disk):
    run_dir = small_disk / "run"
    first = run_ddq(*TRAIN, "--total-steps", "2000", "--run-dir", str(run_dir))
    assert first.returncode == 0, first.stderr[-3000:]
    checkpoint = run_dir / "checkpoint.pt"
    before, replay_before = digest(checkpoint), digest(run_dir / "replay.npz")

    filler = fill(small_disk, leave=16 * 1024)  # less than a checkpoint: its next save cannot finish
    full = run_ddq("train", "--resume", str(run_dir), "--total-steps", "4000", "--no-progress")
    assert full.returncode == 1, full.stderr[-3000:]  # failed once started: 2 is for a command refused before
    errors = [line for line in full.stderr.splitlines() if line.startswith("ddq: error")]
    assert len(errors) == 1 and "No space left on device" in errors[0] and str(run_dir) in errors[0], full.stderr
    assert "Traceback" not in full.stderr
    assert digest(checkpoint) == before and digest(run_dir / "replay.npz") == replay_before  # as they were
    assert not list(run_dir.glob(".*.tmp"))  # and no half-written file beside them
    torch.load(checkpoint, map_location="cpu", weights_only=False)

    filler.unlink()  # room again: the resume goes on from that checkpoint and finishes the budget
    resumed = run_ddq("train", "--resume", str(run_dir), "--total-steps", "4000", "--no-progress")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert summary_of(run_dir)["env_steps"] >= 4000
