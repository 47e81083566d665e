"""What executors on other hosts get from the driver, the way PySpark's own package management ships Python:
ddq itself as a zip (`--py-files`, or `SparkContext.addPyFile` when `ddq train` talks to the master), and,
for spark-submit, a Python environment with ddq's dependencies as an archive (`--archives`, Spark's
`spark.archives`), unpacked by Spark beside each executor.

The archive is venv-pack's, chosen over a PEX file by measurement on this project's 2-core machine
(docs/cluster.md): of a 1.2 GB environment, venv-pack wrote 328 MB in 18 s and an executor was ready to
import torch 8.6 s after receiving it (unpacking included), 1.4 s on later starts; PEX wrote 263 MB in
30-32 s, and its first start took 11.7-13.3 s, its later ones 1.7-4.8 s. Either archive runs only with the
same Python (version and path) on the executors' hosts as where it was made.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from ddq.run_folder import write_whole

ENV_ARCHIVE = "ddq-env.tar.gz"
SUBMIT_SCRIPT = "ddq_submit.py"
# What an executor never runs, left out of the environment archive: torch's C++ test programs, headers and
# protobuf compiler (a 2.13.0 CPU wheel: 195 of the environment's 1,150 MB). torch imports, trains and joins
# a gloo group without them; its shared-memory manager (torch/bin/torch_shm_manager) stays.
LEFT_OUT = tuple(f"lib/python*/site-packages/torch/{files}"
                 for files in ("test/*", "include/*", "bin/test_*", "bin/*Test", "bin/protoc*"))


class PackagingError(ValueError):
    """What `ddq package` cannot write, in one line that says what to do."""


def package_zip(folder: Path) -> Path:
    """folder/ddq.zip: the ddq package as Spark's --py-files (and `addPyFile`) take it."""
    package = Path(__file__).resolve().parent  # this module sits at the package's top
    folder.mkdir(parents=True, exist_ok=True)

    def zipped(file: BinaryIO) -> None:
        with zipfile.ZipFile(file, "w", zipfile.ZIP_DEFLATED) as archive:
            for path in sorted(package.rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts:
                    archive.write(path, Path("ddq") / path.relative_to(package))

    return write_whole(folder / "ddq.zip", zipped)


def packable_venv_command() -> str:
    """The commands that make a venv venv-pack can pack: ddq installed without -e, from the checkout this one
    runs from (ddq is on no package index)."""
    root = Path(__file__).resolve().parents[2]
    source = str(root) if (root / "pyproject.toml").is_file() else "ddq"
    return f"python -m venv ENV && ENV/bin/pip install {source}"


def check_environment(prefix: Path) -> None:
    """Raises PackagingError unless `prefix` is a virtual environment venv-pack can pack."""
    try:
        import venv_pack
    except ImportError as error:
        raise PackagingError("writing the environment archive needs venv-pack: pip install 'ddq[cluster]' "
                             "(or pass --no-env and give the executors a Python of their own)") from error
    if not (prefix / "pyvenv.cfg").is_file():
        raise PackagingError(f"{prefix} is not a virtual environment (no pyvenv.cfg); make one with ddq's "
                             f"dependencies ({packable_venv_command()}) and pass --env ENV")
    try:
        venv_pack.core.load_environment(str(prefix))
    except venv_pack.VenvPackException as error:
        first = str(error).splitlines()[0]
        raise PackagingError(f"venv-pack cannot pack {prefix}: {first} (a checkout installed with pip -e?); "
                             f"make a venv with ddq's dependencies ({packable_venv_command()}) and pass --env "
                             "ENV") from error


def environment_archive(prefix: Path, folder: Path, compress_level: int = 4) -> Path:
    """folder/ddq-env.tar.gz: the virtual environment at `prefix`, packed by venv-pack, less `LEFT_OUT`."""
    import venv_pack

    check_environment(prefix)
    folder.mkdir(parents=True, exist_ok=True)
    output = folder / ENV_ARCHIVE
    print(f"ddq package: packing {prefix} into {output} (venv-pack; most of a minute with torch)",
          file=sys.stderr, flush=True)
    try:
        with temporary_files_in(folder) as scratch:
            venv_pack.pack(prefix=str(prefix), output=str(scratch / ENV_ARCHIVE), compress_level=compress_level,
                           verbose=False, filters=[("exclude", pattern) for pattern in LEFT_OUT])
            os.replace(scratch / ENV_ARCHIVE, output)
    except (venv_pack.VenvPackException, OSError) as error:
        raise PackagingError(f"venv-pack could not write {output}: {str(error).splitlines()[0]}") from error
    return output


@contextlib.contextmanager
def temporary_files_in(folder: Path) -> Iterator[Path]:
    """A scratch folder in `folder` that Python's temporary files go to meanwhile, removed as the block ends,
    however it ends. venv-pack writes its archive to a temporary file, then moves it: from /tmp that move is a
    copy, which a Ctrl-C left half written under the archive's name, and a Ctrl-C while it packed left the
    temporary file (up to a gigabyte) in /tmp. Here the move is a rename, and the archive takes its name by
    another only when whole (this process does nothing else meanwhile: `tempfile.tempdir` is its own)."""
    scratch = Path(tempfile.mkdtemp(prefix=".ddq-package-", dir=folder))
    before, tempfile.tempdir = tempfile.tempdir, str(scratch)
    try:
        yield scratch
    finally:
        tempfile.tempdir = before
        shutil.rmtree(scratch, ignore_errors=True)


def write_package(folder: Path, environment: Path | None, compress_level: int = 4) -> list[str]:
    """Writes ddq.zip, ddq_submit.py and (unless `environment` is None) ddq-env.tar.gz into `folder`;
    returns the spark-submit command that uses them. Checks the environment before writing anything."""
    if environment is not None:
        check_environment(environment)
    package_zip(folder)
    shutil.copy(Path(__file__).parent / "spark_submit.py", folder / SUBMIT_SCRIPT)
    # Spark's INFO lines (a hundred at each start under spark-submit, where `ddq train` keeps them in spark.log)
    # would bury ddq's own: spark.log.level sets the level as the context starts (Spark 3.5+)
    command = ["spark-submit", "--master", "URL", "--conf", "spark.log.level=WARN",
               "--py-files", str(folder / "ddq.zip")]
    if environment is not None:
        environment_archive(environment, folder, compress_level)
        command += ["--archives", f"{folder / ENV_ARCHIVE}#environment",
                    "--conf", "spark.pyspark.python=./environment/bin/python",
                    "--conf", f"spark.pyspark.driver.python={environment / 'bin' / 'python'}"]
    return command + [str(folder / SUBMIT_SCRIPT), "[ddq train flags]"]
