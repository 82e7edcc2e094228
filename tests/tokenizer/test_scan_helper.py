"""The scan helper thread speeds long comparisons up but is never waited for: its caller finishes
the scan alone, redoing any segment the helper holds, however long the helper is kept away."""
import os
import subprocess
import sys
import textwrap

import pytest

# The predicate holds the helper inside the segment it claimed until the scan has returned: a
# caller that waited for the helper would wait forever (the subprocess's timeout ends it).
HELD = textwrap.dedent("""
    import threading
    from zllm_core import _native

    main, joined, release = threading.get_ident(), threading.Event(), threading.Event()

    def ok(s):
        if threading.get_ident() != main:
            joined.set()
            release.wait()
        elif s == 0:
            joined.wait(5)  # the helper claims a segment meanwhile
        return s != 150

    print(_native.first_failing(200, ok), joined.is_set())
    release.set()
""")


@pytest.mark.skipif(os.cpu_count() < 2, reason="the scan helper needs a second CPU")
def test_the_caller_finishes_a_scan_the_helper_is_held_inside():
    out = subprocess.run([sys.executable, "-c", HELD], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "ZLLM_SCAN_THREADS": "0"})
    assert out.stdout.split() == ["150", "True"], out.stderr
