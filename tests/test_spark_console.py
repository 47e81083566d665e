"""A run's console shows ddq's own lines: py4j's tracebacks, of calls to a JVM that is gone, stay off it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# A real py4j client calling a peer that hangs up mid-call, as a JVM exiting does. Run in a process of its
# own: logging's root logger, where py4j sends this traceback, is set up by the first line logged to it.
CALL_A_JVM_THAT_HANGS_UP = textwrap.dedent("""
    import socket, sys, threading
    from py4j.java_gateway import GatewayClient, GatewayParameters
    from py4j.protocol import ERROR
    if sys.argv[1] == "quiet":
        from ddq.spark.context import quiet_py4j
        quiet_py4j()
    peer = socket.create_server(("127.0.0.1", 0))

    def hang_up():
        while True:
            call, _ = peer.accept()
            call.recv(100)
            call.close()

    threading.Thread(target=hang_up, daemon=True).start()
    client = GatewayClient(gateway_parameters=GatewayParameters(port=peer.getsockname()[1]))
    assert client.send_command("c\\nt\\nstop\\ne\\n") == ERROR  # py4j's answer for a call that failed
    print("answered")
""")


def call_a_jvm_that_hangs_up(how: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CALL_A_JVM_THAT_HANGS_UP, how], capture_output=True, text=True,
                          timeout=60)


def test_py4j_logs_a_cut_off_call_on_the_root_logger_and_ddq_keeps_it_off_the_console():
    loud = call_a_jvm_that_hangs_up("as py4j is")
    assert loud.stdout == "answered\n" and "Exception while sending command" in loud.stderr  # what CI once saw
    quiet = call_a_jvm_that_hangs_up("quiet")
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "answered\n", "")
