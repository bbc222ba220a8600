"""policies.membership: which ranks train at each step when workers leave and come back."""

from __future__ import annotations

import pytest

from policies.membership import Absence, Membership


def test_live_ranks_follow_the_absences() -> None:
    m = Membership(4, (Absence((2, 3), 10, 20), Absence((1,), 15)))
    assert m.live(9) == (0, 1, 2, 3)
    assert m.live(10) == (0, 1)
    assert m.live(15) == (0,)
    assert m.live(20) == (0, 2, 3)
    assert m.changes and not Membership(4).changes


def test_joiners_and_their_source() -> None:
    m = Membership(4, (Absence((2, 3), 10, 20), Absence((0,), 5, 20)))
    assert m.joining(20) == (0, 2, 3)
    assert m.source(20) == 1  # the lowest rank that trained both at 19 and at 20
    assert m.joining(10) == () and m.joining(0) == ()
    assert Membership(2, (Absence((1,), 0, 5),)).joining(5) == (1,)  # a late arrival joins too


def test_next_live_step_and_boundaries() -> None:
    m = Membership(3, (Absence((1,), 4, 8, index=0), Absence((1,), 8, 12, index=1), Absence((2,), 6, None, index=2)))
    assert m.next_live(1, 4) == 12  # two absences back to back
    assert m.next_live(2, 6) is None
    assert m.next_live(0, 6) == 6
    assert m.boundaries() == (
        (4, "leave_step", 0),
        (6, "leave_step", 2),
        (8, "join_step", 0),
        (8, "leave_step", 1),
        (12, "join_step", 1),
    )


@pytest.mark.parametrize(
    ("absence", "message"),
    [
        (lambda: Absence((), 1, 2), "at least one rank"),
        (lambda: Absence((1,), -1, 2), "leave_step -1"),
        (lambda: Absence((1,), 5, 5), "join_step 5; allowed: more than leave_step"),
    ],
)
def test_bad_absences_are_refused(absence, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message):
        absence()


def test_ranks_outside_the_world_are_refused() -> None:
    with pytest.raises(ValueError, match=r"ranks \[4\] do not exist \(world size 4\)"):
        Membership(4, (Absence((1, 4), 0, 2),))
