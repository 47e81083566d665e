"""The suite's mark for tests made on test hosts (`ddq.benchmarks.testhosts`): skipped, with the reason,
where this machine cannot make them."""

import pytest

from ddq.benchmarks.testhosts import why_not_here

skip_unless_root = pytest.mark.skipif(why_not_here() is not None, reason=str(why_not_here()))
