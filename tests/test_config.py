"""Settings from the environment: defaults, bounds, and errors that name the variable."""

from dataclasses import fields, replace

import pytest

from feedbridge.config import Settings, parse_forum
from feedbridge.errors import ConfigError
from feedbridge.staticsite.plan import load_build_config


def test_defaults_follow_the_configuration_docs():
    settings = Settings.from_env({})
    assert [f.base_url for f in settings.forums] == ["https://dev-discuss.pytorch.org"]
    assert (settings.cache_ttl, settings.stale_ttl, settings.pages_max) == (300, 86400, 5)
    assert settings.cache_url is None


def test_values_and_redis_url_fallback():
    settings = Settings.from_env({
        "FEEDBRIDGE_FORUMS": "http://127.0.0.1:8123  https://Example.COM/forum/",
        "FEEDBRIDGE_CACHE_TTL": "5", "FEEDBRIDGE_READ_TIMEOUT": "2.5", "REDIS_URL": "redis://r:6379/0",
        "FEEDBRIDGE_TOPIC_BUDGET": "7", "FEEDBRIDGE_TOPIC_TTL": "3600", "FEEDBRIDGE_CONTENT": "full",
    })
    assert (settings.topic_budget, settings.topic_ttl, settings.content_default) == (7, 3600, "full")
    assert [f.key for f in settings.forums] == ["127.0.0.1:8123", "example.com/forum"]
    assert settings.forum_for_key("example.com/forum").base_url == "https://example.com/forum"
    assert (settings.cache_ttl, settings.read_timeout, settings.cache_url) == (5, 2.5, "redis://r:6379/0")
    assert Settings.from_env({"FEEDBRIDGE_CACHE_URL": "redis://a", "REDIS_URL": "redis://b"}).cache_url == "redis://a"


@pytest.mark.parametrize("env,words", [
    ({"FEEDBRIDGE_CACHE_TTL": "x"}, "FEEDBRIDGE_CACHE_TTL must be an integer"),
    ({"FEEDBRIDGE_READ_TIMEOUT": "1000"}, "FEEDBRIDGE_READ_TIMEOUT must be between"),
    ({"FEEDBRIDGE_PAGES_MAX": "0"}, "FEEDBRIDGE_PAGES_MAX must be between 1"),
    ({"FEEDBRIDGE_PAGES_DEFAULT": "4", "FEEDBRIDGE_PAGES_MAX": "3"}, "FEEDBRIDGE_PAGES_DEFAULT"),
    ({"FEEDBRIDGE_FORUMS": "ftp://x"}, "not an http(s) base URL"),
    ({"FEEDBRIDGE_FORUMS": "https://user:pw@x.org"}, "plain base URL"),
    ({"FEEDBRIDGE_CONTENT": "all"}, "FEEDBRIDGE_CONTENT"),
    ({"FEEDBRIDGE_LOG_LEVEL": "verbose"}, "FEEDBRIDGE_LOG_LEVEL must be 'DEBUG' or 'INFO'"),
    ({"FEEDBRIDGE_CONTACT_URL": "mailto:me@x.org"}, "FEEDBRIDGE_CONTACT_URL must be an http(s) URL"),
    ({"FEEDBRIDGE_CONTACT_URL": "https://x.org/a b"}, "FEEDBRIDGE_CONTACT_URL must be an http(s) URL"),
    ({"FEEDBRIDGE_MULTISITE": "dev-discuss.pytorch.org"}, "FEEDBRIDGE_MULTISITE must be groups of two forums"),
    ({"FEEDBRIDGE_MULTISITE": "dev-discuss.pytorch.org,other.example"}, "FEEDBRIDGE_MULTISITE: every forum in it once"),
    ({"FEEDBRIDGE_FILTER_TERMS": "dev-discuss.pytorch.org=status:solved;x"}, "FEEDBRIDGE_FILTER_TERMS must be a term"),
    ({"FEEDBRIDGE_FILTER_TERMS": "other.example=assigned"}, "other.example is not a forum of FEEDBRIDGE_FORUMS"),
])
def test_errors_name_the_variable(env, words):
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
        Settings.from_env(env)


def test_forum_key_keeps_the_subfolder():
    forum = parse_forum("https://Forum.example.org/community/")
    assert (forum.base_url, forum.key) == ("https://forum.example.org/community", "forum.example.org/community")


def test_every_number_is_bounded_where_it_is_declared():
    """Each numeric setting carries its variable and bounds on its own field: past either bound is an
    error naming that variable, and the default the dataclass has is the one the environment gives."""
    numbers = [f for f in fields(Settings) if f.type in ("int", "float")]
    spec = {f.name: f.metadata.get("env") for f in numbers}
    assert [name for name, env in spec.items() if env is None] == ["max_redirects"]  # not configurable
    for env in filter(None, spec.values()):
        for outside in (env.low - 1, env.high + 1):
            with pytest.raises(ConfigError, match=f"{env.names[0]} must be between") as raised:
                Settings.from_env({env.names[0]: str(outside)})
            assert raised.value.setting == env.names[0]
    assert Settings() == Settings.from_env({})


def test_bounds_hold_however_the_settings_are_made(tmp_path):
    """Made in code (`Settings(...)`, `dataclasses.replace`) or by the static build's config, a number past
    its bound and inconsistent settings are the same errors as from the environment."""
    for f in fields(Settings):
        env = f.metadata.get("env")
        if env is None or env.low is None or env.high is None:
            continue
        for outside in (env.low - 1, env.high + 1):
            with pytest.raises(ConfigError, match=f"{env.names[0]} must be between") as raised:
                replace(Settings(), **{f.name: type(f.default)(outside)})
            assert raised.value.setting == env.names[0]
    with pytest.raises(ConfigError, match="FEEDBRIDGE_PAGES_DEFAULT .* must be at most"):
        Settings(pages_default=6, pages_max=5)
    with pytest.raises(ConfigError, match="FEEDBRIDGE_REQUEST_DEADLINE .* must be below"):
        Settings(request_deadline=40.0, worker_timeout=40)
    config = tmp_path / "feeds.toml"
    config.write_text('site_url = "https://feeds.example.org/"\n[[feeds]]\nforum = "https://forum.example.org"\nname = "latest"\npath = "latest"\n',
                      encoding="utf-8")
    built = load_build_config(config)  # its settings made in code: within every bound
    assert built.settings.singleflight_wait > built.settings.request_deadline


def test_an_ipv6_client_is_its_prefix_and_a_mapped_ipv4_address_its_ipv4_one():
    from feedbridge.web.context import client_of

    assert client_of("2001:db8:1:2:aaaa::1", 64) == client_of("2001:db8:1:2:bbbb::9", 64) == "2001:db8:1:2::/64"
    assert client_of("2001:db8:1:3::1", 64) != client_of("2001:db8:1:2::1", 64)
    assert client_of("2001:db8::1", 128) != client_of("2001:db8::2", 128)
    assert client_of("2001:db8:0:ff00::1", 56) == client_of("2001:db8:0:ff11::1", 56)
    assert client_of("::ffff:192.0.2.7", 64) == client_of("192.0.2.7", 64) == "192.0.2.7"
    assert client_of("-", 64) == client_of("not an address", 64) == client_of("x" * 8000, 64) == "-"
