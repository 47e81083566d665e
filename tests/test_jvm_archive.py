"""A local master's JVM shares Spark's classes through Java's class-data archive: a real JVM writes one as it
exits, a later start adopts it only once Java maps it, and one cut short is refused and removed (a JVM
that mapped it would crash)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddq.benchmarks.procfs import processes_mentioning
from ddq.spark import jvm_archive
from ddq.spark.context import local_master
from ddq.spark.start import SparkStarting


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A cache folder of the test's own, and the pyspark package's Spark (a machine's own $SPARK_HOME or
    configuration folders could hold files, which no archive is written for)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for variable in ("SPARK_HOME", "SPARK_CONF_DIR"):
        monkeypatch.delenv(variable, raising=False)
    return tmp_path / "cache" / "ddq"


def test_a_first_jvm_writes_the_archive_as_it_exits_and_a_later_start_adopts_only_what_java_maps(cache, tmp_path,
                                                                                                  capfd):
    java = jvm_archive.java_binary()
    assert java is not None
    if not jvm_archive.has_base_archive(java):
        pytest.skip(f"{java} has no archive of its own classes to build Spark's on (a runtime made with jlink)")
    archive = jvm_archive.archive_path(java)
    assert jvm_archive.jvm_options().startswith(jvm_archive.WRITE_OPTION)  # none yet: this JVM is to write it
    starting = SparkStarting(local_master(1), "ddq-archive-test", tmp_path / "spark.log", "127.0.0.1", None, 1,
                             lambda context: None)
    starting.result().parallelize(range(2), 1).map(lambda x: x + 1).collect()
    starting.stop()  # waits for the JVM to write its archive and exit
    assert "[cds]" not in capfd.readouterr().out  # Java's notes on what it left out: not on the driver's stdout
    written = list(cache.glob("*.writing"))
    assert len(written) == 1 and written[0].stat().st_size > 1_000_000, list(cache.iterdir())
    assert processes_mentioning(str(written[0])) == []  # no JVM left writing it
    class_path = Path(f"{written[0]}.classpath").read_text()
    assert "pyspark" in class_path and "jars" in class_path

    # cut short (as by a JVM killed while writing): refused, removed, never made the archive
    cut = cache / f"{archive.stem}.999999999.writing"
    cut.write_bytes(written[0].read_bytes()[: written[0].stat().st_size // 2])
    Path(f"{cut}.classpath").write_text(class_path)
    hidden = written[0].rename(tmp_path / "whole.writing")  # so that the cut one is the only candidate
    jvm_archive.adopt_finished(archive, java)
    assert not archive.exists() and not cut.exists() and not Path(f"{cut}.classpath").exists()

    hidden.rename(written[0])  # the whole one: adopted, its note removed; a second run's, written meanwhile, too
    second = cache / f"{archive.stem}.888888888.writing"
    second.write_bytes(written[0].read_bytes())
    Path(f"{second}.classpath").write_text(class_path)
    assert jvm_archive.jvm_options() == f"-XX:SharedArchiveFile={archive} -Xshare:auto {jvm_archive.QUIET_SHARING}"
    assert archive.exists() and sorted(cache.iterdir()) == [archive, jvm_archive.sources_note(archive)]
    assert jvm_archive.maps(java, archive, class_path)  # (every later local run of the suite maps it in its JVM)


def test_a_java_without_an_archive_of_its_own_classes_shares_nothing_and_starts_as_without_ddq(cache, tmp_path,
                                                                                                  monkeypatch):
    """A runtime made with jlink has no lib/server/classes.jsa; its JVM refuses to start when told to write an
    archive, so ddq asks it for none. Once `java -Xshare:dump` made one, the first run writes Spark's."""
    home = tmp_path / "jre"
    (home / "bin").mkdir(parents=True)
    (home / "lib" / "server").mkdir(parents=True)
    (home / "bin" / "java").write_text("")
    monkeypatch.setenv("JAVA_HOME", str(home))
    assert jvm_archive.jvm_options() == ""
    (home / "lib" / "server" / "classes.jsa").write_bytes(b"")
    assert jvm_archive.jvm_options().startswith(jvm_archive.WRITE_OPTION)


def test_a_class_path_with_a_folder_of_files_shares_nothing(cache, tmp_path, monkeypatch):
    """Java writes no archive for a class path whose first folder holds files: a JVM told to write one fails
    as it exits, in every run (`java -XX:ArchiveClassesAtExit=... -cp conf:jars/*` with a spark-defaults.conf
    in conf: "Cannot have non-empty directory in paths"; after jars/*, such a folder did not hinder it). A
    configuration folder of one's own, or a Spark download's conf/ of templates, is such a folder; an empty
    one is not."""
    java = jvm_archive.java_binary()
    if java is None or not jvm_archive.has_base_archive(java):
        pytest.skip("no java that can write an archive")
    conf = tmp_path / "conf"
    conf.mkdir()
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf))
    assert jvm_archive.jvm_options().startswith(jvm_archive.WRITE_OPTION)
    (conf / "spark-defaults.conf").write_text("spark.ui.enabled false\n")
    assert jvm_archive.jvm_options() == ""
    monkeypatch.delenv("SPARK_CONF_DIR")
    home = tmp_path / "spark"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "spark-env.sh.template").write_text("")
    monkeypatch.setenv("SPARK_HOME", str(home))
    assert jvm_archive.jvm_options() == ""
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "missing"))  # named, not made: nothing on the path
    assert jvm_archive.jvm_options().startswith(jvm_archive.WRITE_OPTION)


def test_an_archive_whose_virtual_environment_is_gone_is_removed_at_the_next_start(cache, tmp_path):
    """Every virtual environment's pyspark keys an archive of its own (70 MB): a deleted one's had stayed in the
    cache for good. Those whose noted java, pyspark or Spark home is gone go; the others stay. So does an
    archive written and never adopted (its clone deleted after its last run) whose class path is gone."""
    cache.mkdir(parents=True)
    kept, orphan = cache / "spark-jvm-kept.jsa", cache / "spark-jvm-orphan.jsa"
    for archive, pyspark in ((kept, tmp_path), (orphan, tmp_path / "deleted-venv" / "pyspark")):
        archive.write_bytes(b"an archive")
        jvm_archive.sources_note(archive).write_text(f"{tmp_path}\n{pyspark}\n{tmp_path}")
    (tmp_path / "jars").mkdir()  # (a class path's conf folder may be missing: Spark names one that is not there)
    for written, pyspark in (("spark-jvm-kept.1.writing", tmp_path), ("spark-jvm-lost.2.writing", tmp_path / "gone")):
        (cache / written).write_bytes(b"an archive that a JVM finished as it exited")  # never adopted
        (cache / f"{written}.classpath").write_text(f"{pyspark}/conf:{pyspark}/jars/*")
    jvm_archive.remove_orphans(cache)
    assert sorted(path.name for path in cache.iterdir()) == [
        "spark-jvm-kept.1.writing", "spark-jvm-kept.1.writing.classpath", "spark-jvm-kept.jsa",
        "spark-jvm-kept.sources"]
