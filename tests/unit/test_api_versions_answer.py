"""ApiVersions' answer is encoded once per (ApiTable, version) and kept: what is kept must
be what the table says now, for the version asked."""

from broker.wire.server import HANDLERS
from broker.handlers.api_versions import encoded_answer
from protocol.request_wire import ApiTable
from protocol.answer_wire import decode_response

API_VERSIONS = 18


def _decoded(apis, version):
    return decode_response(API_VERSIONS, version, encoded_answer(apis, version))


def _finalized(answer) -> dict:
    return {f.name: f.max_version_level for f in answer.finalized_features}


def test_kept_answer_lists_the_tables_ranges_and_features():
    apis = ApiTable(set(HANDLERS), "4.4")
    answer = _decoded(apis, 3)
    assert {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys} == {
        r.api_key: (r.advertised_min, r.max) for r in apis.ranges.values()}
    assert _finalized(answer) == apis.features
    assert encoded_answer(apis, 3) is encoded_answer(apis, 3)  # kept, not encoded again


def test_each_version_is_kept_apart():
    apis = ApiTable(set(HANDLERS), "4.4")
    v0, v3 = encoded_answer(apis, 0), encoded_answer(apis, 3)
    assert v0 != v3
    assert not hasattr(decode_response(API_VERSIONS, 0, v0), "finalized_features")
    assert _finalized(decode_response(API_VERSIONS, 3, v3)) == apis.features


def test_a_change_of_finalized_features_makes_a_new_answer():
    apis = ApiTable(set(HANDLERS), "4.4")
    assert _finalized(_decoded(apis, 3))["transaction.version"] == 2
    apis.transaction_version = 0  # a level 0 feature is not listed, as Kafka leaves it out
    assert "transaction.version" not in _finalized(_decoded(apis, 3))
    apis.transaction_version = 1
    assert _finalized(_decoded(apis, 3))["transaction.version"] == 1


def test_tables_of_different_profiles_do_not_share_answers():
    new, old = ApiTable(set(HANDLERS), "4.4"), ApiTable(set(HANDLERS), "2.8")
    assert _finalized(_decoded(new, 3)) == new.features
    assert _finalized(_decoded(old, 3)) == {}
    assert encoded_answer(new, 3) != encoded_answer(old, 3)
