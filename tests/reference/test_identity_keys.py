"""Cache identity (CR-ID-1 .. CR-ID-6) at the level of keys."""
import ast
from array import array
from pathlib import Path

from reference.identity import MediaSpan, TokenHistory, adapter_root, media_item_digest

ROOT = Path(__file__).resolve().parents[2]


def history(tokens, spans=(), lora=None, P=4):
    return TokenHistory(array("i", list(tokens)), list(spans), adapter_root(lora), P)


def test_100000_distinct_first_pages_give_100000_distinct_keys():
    """The CR-ID-6 example."""
    keys = {history([i % 320, i // 320 % 320, i // 102400, 7]).key(0) for i in range(100_000)}
    assert len(keys) == 100_000


def test_a_page_key_covers_its_whole_prefix():
    """CR-ID-1: equal page contents at the same depth under different prefixes differ."""
    a, b = history(b"abcdwxyz"), history(b"efghwxyz")
    assert a.key(1) != b.key(1)
    assert history(b"abcdwxyzq").key(1) == a.key(1)


def test_only_complete_pages_are_keyed():
    """CR-ID-2."""
    h = history(b"abcdefghij")
    assert len(h.keys(2)) == 2
    try:
        h.key(2)
    except IndexError:
        pass
    else:
        raise AssertionError("a partial page must not get a key")


def test_adapters_are_isolated():
    """CR-ID-3: no adapter, the empty name and names that are prefixes of each other all differ."""
    names = (None, "", "a", "b", "ab", "aa")
    assert len({history(b"abcd", lora=name).key(0) for name in names}) == len(names)
    assert history(b"abcd", lora="aa").key(0) == history(b"abcd", lora="a" * 2).key(0)


def test_media_positions_carry_item_and_offset():
    """CR-ID-4 / CR-MEDIA-1: same placeholder tokens, other item or other offset -> other key."""
    A = media_item_digest("image", (16, 64, 3), b"\x01" * 3072)
    B = media_item_digest("image", (64, 16, 3), b"\x01" * 3072)
    tokens = [97, 98, 262, 262, 262, 262, 99, 100]
    with_a = history(tokens, [MediaSpan(2, 6, A, "image")])
    with_b = history(tokens, [MediaSpan(2, 6, B, "image")])
    two_items = history(tokens, [MediaSpan(2, 4, A, "image"), MediaSpan(4, 6, A, "image")])
    plain = history(tokens)
    assert len({h.key(0) for h in (with_a, with_b, plain)}) == 3
    assert two_items.key(0) == with_a.key(0), "page 0 holds (A,0) (A,1) in both"
    assert two_items.key(1) != with_a.key(1), "page 1 holds (A,0) (A,1) vs (A,2) (A,3)"
    assert A != B, "geometry is part of the item identity"
    assert with_a.same_item(3, 4) and not two_items.same_item(3, 4) and not with_a.same_item(5, 6)


def test_exact_digest():
    """CR-HYB-5: an aligned prefix is its last page key; a partial one has its own digest."""
    h = history(b"abcdefghij")
    assert h.exact_digest(8) == h.key(1) and h.exact_digest(4) == h.key(0)
    assert len({h.exact_digest(L) for L in range(0, 11)}) == 11
    assert history(b"abcdefgXYZ").exact_digest(6) == h.exact_digest(6)


def test_generated_tokens_extend_the_chain():
    h = history(b"abcdefg")
    before = h.key(0)
    h.extend([88, 89])
    assert h.key(0) == before and h.key(1) == history(b"abcdefgXY").key(1)


def test_extending_a_history_leaves_the_tokens_it_was_given_unchanged():
    """A sequence's history shares its request's token array (batching.py): the generated tokens
    of a decode-end publication must not grow the request, which a warmup run or a later file
    parses from again."""
    tokens = array("i", list(b"abcdefg"))
    h = TokenHistory(tokens, [], adapter_root(None), 4)
    h.extend([88, 89])
    assert tokens == array("i", list(b"abcdefg")) and len(h) == 9


def test_the_reference_never_calls_builtin_hash():
    """CR-ID-6: Python's hash() is process-randomized and must not decide identity."""
    for path in (ROOT / "reference").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            assert not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "hash"), (
                f"{path.name}:{node.lineno} calls hash()")
