"""A conversation's ids grow in one buffer; no view handed out ever changes."""
import numpy as np

from zllm_core.cache.token_ids import is_frozen
from zllm_core.tokenizer.id_run import IdRun


def ids(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.uint32)


def test_extensions_write_in_place_and_views_never_change():
    first, run = IdRun.of(ids(1, 2), ids(3))
    views = [first]
    for k in range(200):  # past several reallocations
        view, same = run.extend(views[-1], ids(k))
        assert same is run and is_frozen(view)  # the engine holds it without a copy
        views.append(view)
    assert views[-1].base is views[-2].base  # the latest extension took no copy
    for k, view in enumerate(views):
        assert view.tolist() == [1, 2, 3, *range(k)]


def test_extending_an_earlier_view_branches_into_a_new_run():
    a, run = IdRun.of(ids(1), ids(2))
    b, _ = run.extend(a, ids(3))
    c, branch = run.extend(a, ids(9))  # a retry, or an edited turn, from the earlier prompt
    assert branch is not run
    assert (a.tolist(), b.tolist(), c.tolist()) == ([1, 2], [1, 2, 3], [1, 2, 9])
    d, same = run.extend(b, ids(4))
    assert same is run and d.tolist() == [1, 2, 3, 4]
