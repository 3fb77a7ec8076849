import pytest

from pearl_moe.bench import harness
from pearl_moe.bench.baselines import parse_overrides


def test_overrides_parse_into_config_fields():
    assert parse_overrides("tile_m=64+ring_depth=5") == {"tile_m": 64, "ring_depth": 5}
    assert parse_overrides("epilogue=direct_store") == {"epilogue": "direct_store"}
    assert parse_overrides("shift_a_box=true+acc_slots=2") == {"shift_a_box": True, "acc_slots": 2}
    assert parse_overrides("shift_a_box=False") == {"shift_a_box": False}
    with pytest.raises(ValueError, match="key=value"):
        parse_overrides("tile_m")


def test_variant_names_resolve_to_pearl_implementations():
    impl = harness.get_impl("pearl-s3:tile_m=64+ring_depth=5")
    assert impl.name == "pearl-s3:tile_m=64+ring_depth=5"
    assert impl.config["stage"] == 3 and impl.config["overrides"] == {"tile_m": 64, "ring_depth": 5}
    with pytest.raises(KeyError, match="unknown implementation"):
        harness.get_impl("quack:tile_m=64")
