"""server.pagination: sealed cursors, bounded pages, foreign or forged cursors refused."""

import pytest

from server.errors import InvalidParams
from server.pagination import Pager
from server.sealing import Sealer

ITEMS = tuple(range(7))


@pytest.fixture
def pager():
    return Pager(Sealer(b"p" * 32), page_size=3)


def test_walks_every_item_exactly_once(pager):
    seen, cursor, pages = [], None, 0
    while True:
        page, cursor = pager.page("tools", ITEMS, cursor)
        seen.extend(page)
        pages += 1
        assert len(page) <= 3
        if cursor is None:
            break
    assert seen == list(ITEMS)
    assert pages == 3


def test_exact_multiple_has_no_empty_last_page(pager):
    page, cursor = pager.page("tools", ITEMS[:6], None)
    page, cursor = pager.page("tools", ITEMS[:6], cursor)
    assert list(page) == [3, 4, 5]
    assert cursor is None


def test_short_list_has_no_cursor(pager):
    assert pager.page("tools", (1, 2), None) == ((1, 2), None)
    assert pager.page("tools", (), None) == ((), None)


@pytest.mark.parametrize("first", [None, ""])
def test_absent_or_empty_cursor_is_first_page(pager, first):
    assert pager.offset("tools", first) == 0


def test_cursor_is_opaque_and_bound_to_its_list(pager):
    _, cursor = pager.page("tools", ITEMS, None)
    assert pager.offset("tools", cursor) == 3
    assert cursor not in ("3", "tools:3")  # sealed, not a bare offset
    with pytest.raises(InvalidParams, match="Invalid cursor"):
        pager.page("prompts", ITEMS, cursor)


@pytest.mark.parametrize("cursor", ["3", "tools:3", "abc.def", 3, ["x"], {"o": 1}])
def test_forged_or_malformed_cursor_is_invalid_params(pager, cursor):
    with pytest.raises(InvalidParams) as caught:
        pager.page("tools", ITEMS, cursor)
    assert caught.value.to_wire()["code"] == -32602


def test_cursor_from_another_key_is_refused(pager):
    other = Pager(Sealer(b"q" * 32), page_size=3)
    with pytest.raises(InvalidParams):
        pager.page("tools", ITEMS, other.cursor("tools", 3))


def test_cursor_with_non_numeric_offset_is_refused():
    sealer = Sealer(b"p" * 32)
    pager = Pager(sealer, 3)
    with pytest.raises(InvalidParams):
        pager.offset("tools", sealer.seal("cursor", b"tools:-1"))
    with pytest.raises(InvalidParams):
        pager.offset("tools", sealer.seal("cursor", b"tools"))


def test_cursor_survives_a_shorter_list(pager):
    _, cursor = pager.page("tools", ITEMS, None)
    assert pager.page("tools", (0, 1), cursor) == ((), None)


def test_page_size_must_be_positive():
    with pytest.raises(ValueError, match="page size"):
        Pager(Sealer(b"p" * 32), 0)
