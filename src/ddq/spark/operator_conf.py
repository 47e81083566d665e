"""The settings an operator's Spark properties files name: ddq leaves them off the JVM's command line.

A setting Spark reads only as its JVM starts (`spark.driver.defaultJavaOptions`, the Python daemon's module)
must be on the command line `launch_gateway` builds, and spark-submit lets a `--conf` there override what a
properties file says. The context's configuration cannot be asked before the JVM exists, so ddq reads the
files spark-submit will read (`properties_files`) and leaves those settings to them. (A `--conf` in
`PYSPARK_SUBMIT_ARGS` follows ddq's on the command line, so it wins without this; settings made once the JVM
runs are left to the operator's in `ddq.spark.context`.)
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

from ddq.spark.jvm_archive import spark_conf_folder

# a properties line: its key, then blanks, "=" or ":" (java.util.Properties' separators), then the value
PROPERTY = re.compile(r"^[ \t\f]*([^ \t\f=:#!][^ \t\f=:]*)[ \t\f]*[=: \t\f]")
LINE_BREAK = re.compile(r"\r\n|\r|\n")


def properties_files(submit_args: str) -> list[Path]:
    """The files spark-submit reads properties from, given `PYSPARK_SUBMIT_ARGS`: its `--properties-file`
    (and `--extra-properties-file`s), and spark-defaults.conf in Spark's configuration folder unless a
    properties file was named without `--load-spark-defaults`."""
    try:
        words = shlex.split(submit_args)
    except ValueError:  # spark-submit would refuse it too
        words = []
    named = {"--properties-file": list[str](), "--extra-properties-file": list[str]()}
    for index, word in enumerate(words):
        option, equals, value = word.partition("=")
        if option in named:
            named[option].append(value if equals else words[index + 1] if index + 1 < len(words) else "")
    files = [Path(path) for path in named["--properties-file"][-1:] + named["--extra-properties-file"] if path]
    if not named["--properties-file"] or "--load-spark-defaults" in words:
        files.append(spark_conf_folder() / "spark-defaults.conf")
    return files


def operator_settings() -> set[str]:
    """The settings the properties files spark-submit will read name (none for a file missing or unreadable)."""
    found: set[str] = set()
    for path in properties_files(os.environ.get("PYSPARK_SUBMIT_ARGS", "")):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        continued = False  # the line before ended in an odd number of backslashes: this one goes on its value
        for line in LINE_BREAK.split(text):
            key = None if continued else PROPERTY.match(line + " ")  # (a comment or blank line has none)
            if key:
                found.add(key.group(1))
            continued = (continued or key is not None) and (len(line) - len(line.rstrip("\\"))) % 2 == 1
    return found
