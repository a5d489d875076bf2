"""unknown_request_keys (conformance/cases/schemas.py): one warning per unknown key at each level, also
in a request whose own keys are all known (a request with nothing to report is skipped at once)."""
from conformance.cases import schemas


def test_an_unknown_key_is_found_at_every_level_below_known_ones():
    ok = {"messages": [{"role": "user", "content": "ab"}]}
    doc = {"requests": [ok, {"messages": [{"role": "user", "content": "ab", "contnet": 1}]},
                        ok, {"messages": [{"role": "user", "content": [{"type": "text", "text": "a", "txt": 1,
                                                                         "_note": 0}]}]},
                        {"messages": [{"role": "user", "content": "ab", "_note": 0}], "_scenario": 0}, ok]}
    assert schemas.unknown_request_keys(doc) == [
        ("$.requests[1].messages[0].contnet", "unknown key ignored (did you mean content?)"),
        ("$.requests[3].messages[0].content[0].txt", "unknown key ignored (did you mean text?)")]
