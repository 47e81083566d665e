"""Java's class-data sharing for a local master's JVM: Spark's classes mapped from an archive, not parsed.

A local master's JVM spends most of its start loading and verifying the classes of Spark's jars, on every
run. Java can map them from a class-data sharing (CDS) archive instead, which it writes itself as a JVM
exits when asked (`-XX:ArchiveClassesAtExit`): Spark's context then started in 1.8 s where it took 3.0-3.3
(2026-11-27, a local[2] master alone on 2 cores).

The first local run's JVM writes an archive under a name of its own as it exits, and ddq notes the class
path it ran with beside it. A later run adopts it once no process is writing it and Java maps it with that
class path (`-Xshare:on` refuses an archive it cannot map; one cut short would crash a JVM that mapped it,
so nothing unchecked is used), and every run after maps it. Java checks the archive against its own build
and the jars it was made from, and leaves one that does not match unused (`-Xshare:auto`); a new Java,
pyspark or Spark home keys a new archive, and one whose java, pyspark or Spark home is gone (a deleted
virtual environment's) is removed at the next local start. Nothing is shared where the cache folder cannot
be written, where Java has no archive of its own classes to build on (a runtime made with `jlink`), or where Spark's
configuration folder holds files (`archivable_class_path`): a cluster's driver reads its operator's
spark-defaults.conf from there, which is why only a local master's JVM is asked.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import shutil
import subprocess
from pathlib import Path
from typing import Any

from ddq.run_folder import write_whole

CHECK_S = 30.0  # the most `java -Xshare:on -version` may take to check a finished archive
WRITE_OPTION = "-XX:ArchiveClassesAtExit="
# an archive's regions carry checksums, which the check verifies: a file two writers mixed fails it
CHECKSUMS = "-XX:+VerifySharedSpaces"
# a check that crashes on a file cut short leaves no crash log or core file in the folder ddq runs in
QUIET_CRASH = ("-XX:ErrorFile=/dev/null", "-XX:-CreateCoredumpOnCrash")
# Java logs what it leaves out of an archive (164 "[warning][cds]" lines as a first run's JVM exited) and an
# archive it cannot map to its standard output, which is the driver's: where `ddq train` prints its summary
QUIET_SHARING = "-Xlog:cds*=off"


def cache_folder() -> Path:
    """Where ddq keeps what it makes once per machine ($XDG_CACHE_HOME/ddq, else ~/.cache/ddq)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ddq"


def java_binary() -> str | None:
    """The java that Spark's launcher runs: $JAVA_HOME's, else the one on the PATH."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return str(Path(found).resolve()) if found and Path(found).exists() else None


def has_base_archive(java: str) -> bool:
    """Whether this Java has the archive of its own classes that Spark's is written on top of. A runtime made
    with `jlink` has none unless asked (`-Xshare:dump` makes it), and its JVM then refuses to start when told
    to write one ("DynamicDumpSharedSpaces is unsupported when base CDS archive is not loaded")."""
    return any(Path(java).parents[1].glob("lib/*/classes*.jsa"))


def spark_home() -> Path:
    """The Spark whose launcher starts the JVM, found as pyspark finds it: $SPARK_HOME, else a Spark download
    that pip put beside pyspark (PYSPARK_HADOOP_VERSION), else the pyspark package."""
    import pyspark

    try:
        from pyspark.find_spark_home import _find_spark_home  # what pyspark's launch asks

        return Path(_find_spark_home())
    except (ImportError, SystemExit):  # another pyspark; or none found (it said so), and its launch fails too
        return Path(os.environ.get("SPARK_HOME") or Path(pyspark.__file__).parent)


def spark_conf_folder() -> Path:
    """Spark's configuration folder as its launcher finds it ($SPARK_CONF_DIR, else the Spark home's conf):
    first on the JVM's class path, and where spark-submit reads spark-defaults.conf."""
    return Path(os.environ.get("SPARK_CONF_DIR") or spark_home() / "conf")


def archivable_class_path() -> bool:
    """Whether Java can archive the classes of the class path Spark's launcher gives its JVM: not where its
    configuration folder (`spark_conf_folder`), first on that path, holds files (a
    spark-defaults.conf, or a Spark download's templates). A JVM told to write an archive then fails as it
    exits, in every run ("Cannot have non-empty directory in paths", Java 17); folders after Spark's jars
    (Hadoop's and YARN's configuration) are no hindrance, as no class is loaded from them."""
    folder = spark_conf_folder()
    return not (folder.is_dir() and any(folder.iterdir()))


def archive_sources(java: str) -> tuple[str, str, str]:
    """What an archive is made from: the java, pyspark's package and the Spark home (any of them gone, so is
    the archive's use)."""
    import pyspark

    return java, str(Path(pyspark.__file__).resolve()), str(spark_home().resolve())


def archive_path(java: str) -> Path:
    """The archive for this java and this Spark (either changed, a new one is made)."""
    import pyspark

    java, package, home = archive_sources(java)
    key = f"{java}\n{os.stat(java).st_mtime_ns}\n{pyspark.__version__}\n{package}\n{home}"
    return cache_folder() / f"spark-jvm-{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsa"


def sources_note(archive: Path) -> Path:
    """Beside an adopted archive, the paths it was made from: the java, pyspark, and the Spark home."""
    return archive.with_suffix(".sources")


def note_sources(archive: Path, java: str) -> None:
    """Notes beside `archive`, as it is adopted, the paths `remove_orphans` checks."""
    write_whole(sources_note(archive), "\n".join(archive_sources(java)).encode())


def remove_orphans(folder: Path) -> None:
    """Removes the archives whose java, pyspark or Spark home is gone (a deleted virtual environment's, 70 MB
    each, had stayed for good), by the paths noted beside each; and the archives written but never adopted
    whose noted class path is all gone (a JVM's last, in a clone deleted before its next run; Spark's conf
    folder on it may never have been there), unless a live process still writes one."""
    for note in folder.glob("spark-jvm-*.sources"):
        with contextlib.suppress(OSError):
            if not all(Path(path).exists() for path in note.read_text().splitlines()):
                note.with_suffix(".jsa").unlink(missing_ok=True)
                note.unlink()
    for note in folder.glob("spark-jvm-*.writing.classpath"):
        written = note.with_suffix("")
        with contextlib.suppress(OSError):
            entries = [entry.removesuffix("*") for entry in note.read_text().split(os.pathsep)]
            if not any(Path(entry).exists() for entry in entries) and not being_written(written):
                written.unlink(missing_ok=True)
                note.unlink()


def jvm_options() -> str:
    """Options that share Spark's classes: map the archive, or (none yet) write one as this JVM exits.
    "" without a java to check archives with, or a cache folder this process may write in: the JVM then
    starts as it would without ddq."""
    try:
        java = java_binary()
        if java is None:
            return ""
        if not has_base_archive(java) or not archivable_class_path():
            return ""
        archive = archive_path(java)
        archive.parent.mkdir(parents=True, exist_ok=True)
        if not os.access(archive.parent, os.W_OK):
            return ""
        remove_orphans(archive.parent)
        adopt_finished(archive, java)
        if archive.exists():
            return f"-XX:SharedArchiveFile={archive} -Xshare:auto {QUIET_SHARING}"
        # its own name: another process (another container sharing the folder, too) may be writing one
        writing = archive.with_suffix(f".{secrets.token_hex(6)}.writing")
        return f"{WRITE_OPTION}{writing} {CHECKSUMS} {QUIET_SHARING}"
    except (OSError, RuntimeError, ValueError):  # no home folder, no /proc, a file another run just took
        return ""


def java_options(conf: Any) -> str:
    """The options ddq gives the JVM it starts (`ddq.spark.context.spark_conf`), from its SparkConf."""
    return str(conf.get("spark.driver.defaultJavaOptions", ""))


def writing_to(options: str) -> str | None:
    """The archive a JVM started with `options` writes as it exits, if it writes one."""
    return next((option[len(WRITE_OPTION):] for option in options.split() if option.startswith(WRITE_OPTION)), None)


def note_class_path(options: str, jvm_pid: int) -> None:
    """Beside the archive a JVM started with `options` will write, the class path it runs with (read from
    its command line), which the archive's check needs."""
    writing = writing_to(options)
    if writing is None:
        return
    with contextlib.suppress(OSError, ValueError, IndexError):
        arguments = Path(f"/proc/{jvm_pid}/cmdline").read_bytes().decode().split("\0")
        write_whole(f"{writing}.classpath", arguments[arguments.index("-cp") + 1].encode())


def adopt_finished(archive: Path, java: str) -> None:
    """Makes `archive`, where there is none yet, of one an earlier JVM finished writing and java maps; removes
    the other finished ones: those it does not map, and, once there is an archive, the rest (two runs that
    found none both wrote one, and the second's 70 MB had stayed for good). One that a live process's command
    line names may still be being written, and is left alone."""
    for written in archive.parent.glob(f"{archive.stem}.*.writing"):
        if being_written(written):
            continue
        noted = Path(f"{written}.classpath")
        try:
            class_path: str | None = noted.read_text()
        except OSError:  # not noted (or another run adopted it meanwhile)
            class_path = None
        adopted = False
        if not archive.exists() and class_path is not None and maps(java, written, class_path):
            with contextlib.suppress(OSError):
                os.replace(written, archive)
                adopted = True
                note_sources(archive, java)
        for leftover in ([] if adopted else [written]) + [noted]:
            with contextlib.suppress(OSError):
                leftover.unlink()


def being_written(path: Path) -> bool:
    """Whether a live process's command line names `path` (the JVM that writes it as it exits)."""
    named = str(path).encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if named in Path(f"/proc/{pid}/cmdline").read_bytes():
                return True
    return False


def maps(java: str, archive: Path, class_path: str) -> bool:
    """Whether java maps `archive` with `class_path` (-Xshare:on fails where it cannot)."""
    try:
        checked = subprocess.run([java, f"-XX:SharedArchiveFile={archive}", "-Xshare:on", CHECKSUMS, *QUIET_CRASH,
                                  "-cp", class_path, "-version"], capture_output=True, timeout=CHECK_S,
                                 cwd=archive.parent)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return checked.returncode == 0
