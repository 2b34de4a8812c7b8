import pytest

from lakeview.config.cadence import parse_cadence


@pytest.mark.parametrize(("text", "seconds"), [("5s", 5), ("1m", 60), ("1h", 3600), ("500ms", 0.5), ("1.5m", 90)])
def test_durations(text: str, seconds: float) -> None:
    cadence = parse_cadence(text)
    assert cadence.seconds == seconds and not cadence.is_manual


def test_manual() -> None:
    assert parse_cadence("manual").is_manual


@pytest.mark.parametrize("text", ["", "5", "fast", "5 sec", "-1s", "10us"])
def test_rejected_with_valid_forms(text: str) -> None:
    with pytest.raises(ValueError, match="manual"):
        parse_cadence(text)


def test_below_minimum() -> None:
    with pytest.raises(ValueError, match="minimum"):
        parse_cadence("50ms")


def test_spark_trigger() -> None:
    assert parse_cadence("2s").spark_trigger == "2000 milliseconds"
