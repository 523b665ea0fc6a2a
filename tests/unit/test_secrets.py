"""What counts as a secret: by name (snake and camel case) and by well-known token shape;
ordinary names and values are left alone."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from jupyter_ktrain.capture.secrets import (
    env_name,
    find_in_source,
    find_in_value,
    is_secret_name,
)

# built at run time so this file itself holds no token-shaped literal
HF = "hf_" + "Zq8" * 12
SHAPES = {
    "a Hugging Face token": HF,
    "an OpenAI-style API key": "sk-" + "proj-" + "a1B2" * 8,
    "a GitHub token": "ghp_" + "x9Y" * 12,
    "a GitHub token ": "github_" + "pat_" + "11ABC" * 6,
    "an AWS access key id": "AKIA" + "QWERTYUIOPASDFGH",
    "a Slack token": "xoxb" + "-123456789012-abcdefABCDEF",
    "a JSON Web Token": "eyJhbGciOiJIUzI1NiJ9" + ".eyJzdWIiOiIxMjM0NSJ9" + ".c2lnbmF0dXJlLXBhcnQ",
    "a PEM private key": "-----BEGIN RSA " + "PRIVATE KEY-----\nMIIE...",
}


@pytest.mark.parametrize(
    "name",
    ["HF_TOKEN", "hfToken", "db_password", "PASSWD", "AWS_SECRET_ACCESS_KEY", "apiKey",
     "OPENAI_API_KEY", "private_key", "gcp_credentials", "Credential", "clientSecret"],
)  # fmt: skip
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    ["tokenizer", "MAX_TOKENS", "key_dim", "vocab", "num_tokens", "keys", "api_url",
     "access_log", "monkey", "passage", "secretary_count", "TOKEN_TYPE", "SECRET_NAME",
     "token_file", "passwordHint", "API_KEY_ENV"],
)  # fmt: skip
def test_ordinary_names(name: str) -> None:
    assert not is_secret_name(name)


@pytest.mark.parametrize("kind", sorted(SHAPES))
def test_token_shapes_are_found_under_any_name(kind: str) -> None:
    found = find_in_value("data", {"nested": [("x", SHAPES[kind])]})
    assert found is not None
    assert found.kind.startswith(kind.strip())
    assert found.where == "data['nested'][0][1]"


@dataclass
class Settings:
    model: str = "gpt2"
    hf_token: str = ""


def test_found_by_name_in_a_dict_a_dataclass_and_a_list() -> None:
    assert find_in_value("CONFIG", {"lr": 0.1, "dbPassword": "hunter22"}).where == (  # type: ignore[union-attr]
        "CONFIG['dbPassword']"
    )
    assert find_in_value("S", Settings(hf_token="abcdef123")).where == "S.hf_token"  # type: ignore[union-attr]
    assert find_in_value("PASSWORD_LIST", ["p4ssw0rd!"]) is not None
    assert env_name("hfToken") == "HF_TOKEN"


@pytest.mark.parametrize(
    "value",
    [
        {"tokenizer": "bert-base-uncased", "MAX_TOKENS": 512, "key_dim": 64},
        {"vocab": ["a", "b"], "path": "/data/train.txt", "model_id": "meta-llama/Llama-2-7b-hf"},
        {"pad_token": "<pad>", "cls_token": "[CLS]", "token_env": "HF_TOKEN"},
        {"token_file": "/var/run/secrets/token", "hf_token": "", "eos_token": "</s>"},
        {"PASSWORD_HINT": "ask the admin", "token_ids": [1, 2, 3]},
        {"token_type": "bearer", "secret_name": "hf-token", "SECRET_KEY_NAME": "token"},
    ],
)
def test_no_false_alarm_on_ordinary_values(value: dict[str, object]) -> None:
    assert find_in_value("CFG", value) is None


def test_found_in_source_defaults_keywords_dicts_and_assignments() -> None:
    assert find_in_source("def train(token='abcdef12'):\n    pass\n", "train").where == (  # type: ignore[union-attr]
        "default of token (line 1)"
    )
    assert find_in_source("login(api_key='zzzz9999')\n", "c").name == "api_key"  # type: ignore[union-attr]
    assert find_in_source("x = {'password': 'pw-12345'}\n", "c") is not None
    assert find_in_source(f"def f():\n    return {HF!r}\n", "f").where == "line 2"  # type: ignore[union-attr]
    ordinary = (
        "import os\nMAX_TOKENS = 512\ntokenizer = load('bert-base-uncased')\n"
        "token = os.environ['HF_TOKEN']\npad_token = '<pad>'\n"
        "def train(model_id='meta-llama/Llama-2-7b-hf', path='/data/x'):\n    pass\n"
    )
    assert find_in_source(ordinary, "c") is None


def test_env_flag_with_a_secret_value_is_refused_and_a_bare_name_is_local_only() -> None:
    from jupyter_ktrain import SpecError
    from jupyter_ktrain.options import parse_flags, spec_from_args

    with pytest.raises(SpecError, match="--secret-env HF_TOKEN=hf-token/token"):
        spec_from_args(parse_flags(f"--backend local --env HF_TOKEN={HF}"))
    with pytest.raises(SpecError, match="local backend only"):
        spec_from_args(parse_flags("--backend kubernetes --env HF_TOKEN"))
    spec = spec_from_args(
        parse_flags(f"--backend local --env HF_TOKEN={HF} --allow-secret HF_TOKEN")
    )
    assert spec.env == (("HF_TOKEN", HF),)
    spec = spec_from_args(
        parse_flags("--backend local --env HF_TOKEN --env TOKENIZERS_PARALLELISM=false")
    )
    assert (spec.pass_env, spec.env) == (("HF_TOKEN",), (("TOKENIZERS_PARALLELISM", "false"),))


def test_allow_secret_ships_it_and_says_what_that_means() -> None:
    from jupyter_ktrain import SecretError
    from jupyter_ktrain.capture import capture

    ns = {"HF_TOKEN": HF, "train": None}
    history = ["", f"HF_TOKEN = {HF!r}"]
    with pytest.raises(SecretError) as info:
        capture("n = len(HF_TOKEN)", ns, history)
    assert info.value.name == "HF_TOKEN"
    assert "'HF_TOKEN' (cell [1]) is a secret (a Hugging Face token, by its value)" in str(
        info.value
    )
    program = capture("n = len(HF_TOKEN)", ns, history, allow_secrets=["HF_TOKEN"])
    assert HF in program.source
    (warning,) = program.warnings
    assert "--allow-secret HF_TOKEN" in warning
    assert "can read it" in warning
    from_env = capture("n = len(HF_TOKEN)", ns, history, from_env=["HF_TOKEN"])
    assert HF not in from_env.source
    assert "HF_TOKEN = __import__('os').environ['HF_TOKEN']" in from_env.source
