"""The client loads its settings without pydantic (sparkyard.client_settings, so that the CLI starts fast) from
data generated out of their one definition, sparkyard.config.ClientConfig: whatever the flags, variables and
file say, it must come to the same values, or refuse with the same line, as loading ClientConfig does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkyard.client_fields import FIELDS
from sparkyard.client_settings import ClientSettings, load_client
from sparkyard.config import ClientConfig, ConfigError, load

NAMES = [name for name, _, _ in FIELDS]
# A TOML value as written in the file: strings of each kind of setting, then values of other types.
TOML_VALUES = ['"h1:7070,h2"', '"10s"', '"2.5"', '"1h30m"', '"soon"', '""', '"-1"', '"inf"', "7070", "1.5", "-3",
               "true", "[1, 2]", "{a = 1}", "1979-05-27", "1979-05-27T07:32:00Z", "inf", "nan"]
ENV_VALUES = ["h:1", "127.0.0.1:7071", "", "10s", "3", "1e3", "nope", "-1", "nan", " 5 "]
FLAG_VALUES: list[Any] = ["h:1", "", "10s", "bad", 5, 2.5, 0, True, False, [1], {"a": 1}, b"ab", b"3", b"\xff", -1.0]

Outcome = tuple[str, Any]


def _outcome(load_it: Callable[[], Any]) -> Outcome:
    try:
        loaded = load_it()
    except ConfigError as exc:
        return "refused", str(exc)
    values = loaded.as_dict() if isinstance(loaded, ClientSettings) else loaded.model_dump()
    return "loaded", repr(values)  # a repr: a duration of nan from a TOML file is loaded alike, and nan != nan


def _both(config_file: str | None, environ: dict[str, str], overrides: dict[str, Any]) -> tuple[Outcome, Outcome]:
    plain = _outcome(lambda: load_client(config_file=config_file, environ=environ, overrides=overrides))
    model = _outcome(lambda: load(ClientConfig, "client", config_file=config_file, environ=environ,
                                  overrides=overrides))
    return plain, model


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A secret file, an empty one and a missing one (the token_file cases), and where the TOML file goes."""
    root = tmp_path_factory.mktemp("client-settings")
    (root / "secret").write_text("  s3cret\n")
    (root / "empty").write_text("\n")
    return {"secret": str(root / "secret"), "empty": str(root / "empty"), "missing": str(root / "missing"),
            "toml": str(root / "sparkyard.toml")}


def _source(name: str, files: dict[str, str]) -> st.SearchStrategy[tuple[str, Any] | None]:
    """Where one setting is given, if anywhere: a flag, a variable (its name in some case) or the file."""
    flag_values = FLAG_VALUES + ([files["secret"], files["empty"], files["missing"]] if name == "token_file" else [])
    env_values = ENV_VALUES + ([files["secret"], files["missing"]] if name == "token_file" else [])
    toml_values = TOML_VALUES + ([json.dumps(files["secret"])] if name == "token_file" else [])
    return st.one_of(
        st.none(),
        st.tuples(st.just("flag"), st.sampled_from(flag_values)),
        st.tuples(st.sampled_from(["env", "env-lower"]), st.sampled_from(env_values)),
        st.tuples(st.just("file"), st.sampled_from(toml_values)),
    )


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_the_plain_loader_loads_what_client_config_loads(data: st.DataObject, files: dict[str, str]) -> None:
    overrides: dict[str, Any] = {}
    environ: dict[str, str] = {"HOME": "/root", "SPARKYARD_NOPE": "x"}
    lines = []
    for name in NAMES:
        # Several sources for one setting at once: the order between them is what is tested.
        for source in data.draw(st.lists(_source(name, files), max_size=3), label=name):
            if source is None:
                continue
            where, value = source
            if where == "flag":
                overrides[name] = value
            elif where == "env":
                environ[f"SPARKYARD_{name.upper()}"] = value
            elif where == "env-lower":
                environ[f"sparkyard_{name}"] = value
            else:
                lines.append(f"{name} = {value}")
    if data.draw(st.booleans(), label="unknown key"):
        lines.append("bogus = 1")
    config_file = None
    if lines or data.draw(st.booleans(), label="empty file"):
        Path(files["toml"]).write_text("[client]\n" + "\n".join(dict.fromkeys(lines)) + "\n")
        config_file = files["toml"]
    plain, model = _both(config_file, environ, overrides)
    assert plain == model


@pytest.mark.parametrize("name", NAMES)
def test_every_value_alone_from_every_source_loads_alike(name: str, files: dict[str, str]) -> None:
    """Each value of the pools as the only one given, so that none hides behind another setting's error."""
    cases: list[tuple[str | None, dict[str, str], dict[str, Any]]] = []
    cases += [(None, {}, {name: value}) for value in FLAG_VALUES]
    cases += [(None, {f"SPARKYARD_{name.upper()}": value}, {}) for value in ENV_VALUES]
    for value in TOML_VALUES:
        path = Path(files["toml"]).with_name(f"{len(cases)}.toml")
        path.write_text(f"[client]\n{name} = {value}\n")
        cases.append((str(path), {}, {}))
    for config_file, environ, overrides in cases:
        plain, model = _both(config_file, environ, overrides)
        assert plain == model, (config_file and Path(config_file).read_text(), environ, overrides)


@pytest.mark.parametrize("text", ['client = 3\n', '[client]\nmaster = "h:1"\n[client]\n', "not toml ["])
def test_a_file_the_client_cannot_read_is_refused_alike(text: str, files: dict[str, str]) -> None:
    Path(files["toml"]).write_text(text)
    plain, model = _both(files["toml"], {}, {})
    assert plain == model
    assert plain[0] == "refused" and plain[1].startswith(f"config file {files['toml']}")


def test_a_missing_file_is_refused_alike(files: dict[str, str]) -> None:
    plain, model = _both(None, {"SPARKYARD_CONFIG": files["missing"]}, {})
    assert plain == model == ("refused", f"config file {files['missing']} not found")


@pytest.mark.parametrize("environ, overrides, line", [
    ({"SPARKYARD_CALL_TIMEOUT_S": "soon"}, {},
     "SPARKYARD_CALL_TIMEOUT_S: 'soon' is not a duration (use e.g. 500ms, 10s, 5m, 1h30m)"),
    # A variable named in lower case is named as it was given, not as the file.
    ({"sparkyard_call_timeout_s": "soon"}, {},
     "sparkyard_call_timeout_s: 'soon' is not a duration (use e.g. 500ms, 10s, 5m, 1h30m)"),
    ({}, {"master": 7070}, "--master: 7070 is not a valid string"),
    ({}, {"call_timeout_s": [1]}, "--call-timeout: [1] is not a valid number"),
    ({"SPARKYARD_TLS_CERT": "c.crt", "SPARKYARD_TLS_KEY": "c.key"}, {},
     "tls_cert needs tls_ca (--tls-ca): the CA that signed the master's certificate"),
])
def test_a_bad_value_is_one_line_naming_its_source(environ: dict[str, str], overrides: dict[str, Any],
                                                   line: str) -> None:
    plain, model = _both(None, environ, overrides)
    assert plain == model == ("refused", line)


def test_the_loaded_settings_are_frozen_and_keep_the_token_out_of_their_repr() -> None:
    loaded = load_client(environ={"SPARKYARD_TOKEN": "s3cret"})
    assert (loaded.token, loaded.master, loaded.call_timeout_s) == ("s3cret", "127.0.0.1:7070", 30.0)
    assert "s3cret" not in repr(loaded)
    with pytest.raises(AttributeError):
        loaded.token = "other"
    with pytest.raises(AttributeError):
        loaded.nope  # noqa: B018
