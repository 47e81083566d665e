"""Which settings an operator's Spark properties files name (`ddq.spark.operator_conf`): the files
spark-submit will read, given PYSPARK_SUBMIT_ARGS, read as java.util.Properties reads them. (A real JVM
keeping an operator's launch setting: tests/test_spark_settings.py.)"""

from __future__ import annotations

from pathlib import Path

from ddq.spark.operator_conf import operator_settings, properties_files


def test_a_properties_files_keys_as_java_reads_them(tmp_path, monkeypatch):
    (tmp_path / "spark-defaults.conf").write_text(
        "# comment \\\n! also a comment\n\nspark.a 1\n  spark.b=2\nspark.c: 3\nspark.d\t4\nspark.e\n"
        "spark.f first \\\n  spark.not.a.key part of f's value\r\nspark.g 7\rspark.h\u00a0nbsp\n", encoding="utf-8")
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    # a non-breaking space is no separator to Java: "spark.h\u00a0nbsp" is one key
    assert operator_settings() == {"spark.a", "spark.b", "spark.c", "spark.d", "spark.e", "spark.f", "spark.g",
                                   "spark.h\u00a0nbsp"}
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "none"))
    assert operator_settings() == set()  # no file: nothing named


def test_the_files_spark_submit_reads_follow_pyspark_submit_args(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "conf"))
    defaults = tmp_path / "conf" / "spark-defaults.conf"
    assert properties_files("") == properties_files("pyspark-shell") == [defaults]
    # a properties file of its own replaces spark-defaults.conf, unless told to load it too
    assert properties_files("--properties-file /p/a.conf pyspark-shell") == [Path("/p/a.conf")]
    assert properties_files("--properties-file=/p/a.conf --extra-properties-file /p/b.conf --load-spark-defaults "
                            "pyspark-shell") == [Path("/p/a.conf"), Path("/p/b.conf"), defaults]

    (tmp_path / "mine.conf").write_text("spark.driver.defaultJavaOptions -Dmine\n")
    defaults.parent.mkdir()
    defaults.write_text("spark.python.daemon.module other\n")
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", f"--properties-file '{tmp_path / 'mine.conf'}' pyspark-shell")
    assert operator_settings() == {"spark.driver.defaultJavaOptions"}  # spark-submit reads no spark-defaults.conf
