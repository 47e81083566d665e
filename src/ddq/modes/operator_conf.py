"""The settings an operator's spark-defaults.conf names, which a default ddq puts on the JVM's command line
would override.

A setting Spark reads only as its JVM starts (`spark.driver.defaultJavaOptions`, the Python daemon's module)
must be on the command line `launch_gateway` builds, and spark-submit lets a `--conf` there override the
configuration folder's spark-defaults.conf. The context's configuration cannot be asked before the JVM
exists, so ddq reads the file as spark-submit finds it ($SPARK_CONF_DIR, else the Spark home's conf) and
leaves those settings to it. (`PYSPARK_SUBMIT_ARGS` follows ddq's `--conf`s on the command line, so its own
win without this; settings made once the JVM runs are left to the operator's in `ddq.modes.spark`.)
"""

from __future__ import annotations

import re

from ddq.modes.jvm_archive import spark_conf_folder

# a properties line: its key, then blanks, "=" or ":" (java.util.Properties' separators), then the value
PROPERTY = re.compile(r"^\s*([^\s=:#!][^\s=:]*)\s*[=:\s]")


def operator_settings() -> set[str]:
    """The settings spark-defaults.conf names (none where it is missing or unreadable)."""
    try:
        text = (spark_conf_folder() / "spark-defaults.conf").read_text(errors="replace")
    except OSError:
        return set()
    return {found.group(1) for line in text.splitlines() if (found := PROPERTY.match(line + " "))}
