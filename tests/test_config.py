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
    for url in ("rediss://:pw@cache.example:6380/1", "unix:///run/redis.sock?db=2", "redis://cache", "REDIS://[::1]"):
        assert Settings.from_env({"REDIS_URL": url}).cache_url == url  # URLs redis-py's from_url reads


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
    ({"PORT": "0"}, "PORT must be between 1 and 65535, not 0"),
    ({"WEB_CONCURRENCY": " "}, "WEB_CONCURRENCY is set but empty: give the worker processes (1 to 64)"),
    ({"WEB_CONCURRENCY": "2.5"}, "WEB_CONCURRENCY must be an integer, not '2.5'"),
    ({"REDIS_URL": "http://x"}, "REDIS_URL must be a redis://, rediss:// or unix:// URL"),
    ({"FEEDBRIDGE_CACHE_URL": "redis:x", "REDIS_URL": "redis://x"}, "FEEDBRIDGE_CACHE_URL must be a redis://"),
    ({"FEEDBRIDGE_FORUMS": "https://h.example http://h.example"}, "are one forum to the bridge"),
    # one host in its two spellings: one forum's budget spent twice against one Discourse
    ({"FEEDBRIDGE_FORUMS": "https://bücher.example https://xn--bcher-kva.example/"},  # as written, not twice one
     "https://bücher.example and https://xn--bcher-kva.example/ are one forum to the bridge (xn--bcher-kva.example)"),
    ({"FEEDBRIDGE_FORUMS": "https://b\u200dücher.example"}, "not an http(s) base URL"),  # no IDNA name
    # a forum's key in its Unicode spelling: the error says how keys of such hosts are written
    ({"FEEDBRIDGE_FORUMS": "https://bücher.example", "FEEDBRIDGE_SECRET": "0123456789abcdef0",
      "FEEDBRIDGE_CREDENTIALS": "bücher.example=user-api-key:abc"}, "xn--... for a name not in ASCII"),
])
def test_errors_name_the_variable(env, words):
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
        Settings.from_env(env)


def test_forum_key_keeps_the_subfolder():
    forum = parse_forum("https://Forum.example.org/community/")
    assert (forum.base_url, forum.key) == ("https://forum.example.org/community", "forum.example.org/community")
    # An internationalised host is named as httpx sends it and core names itself, whichever way it is written: one
    # host, two paths are two forums, in either spelling; their keys, ids and links are punycode.
    forums = Settings.from_env({"FEEDBRIDGE_FORUMS": "https://Bücher.example https://xn--bcher-kva.example/b"}).forums
    assert [(f.key, f.base_url) for f in forums] == [("xn--bcher-kva.example", "https://xn--bcher-kva.example"),
                                                     ("xn--bcher-kva.example/b", "https://xn--bcher-kva.example/b")]


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


@pytest.mark.parametrize("env,words", [
    ({"FEEDBRIDGE_FORUMS": "https://bot:hunter2@forum.example"}, "'https://…@forum.example' must be a plain base URL"),
    ({"FEEDBRIDGE_FORUMS": "https://forum.example/?api_key=hunter2"}, "'https://forum.example/?…' must be a plain"),
    ({"FEEDBRIDGE_FORUMS": "https://forum.example/#hunter2"}, "'https://forum.example/#…' must be a plain"),
    ({"FEEDBRIDGE_FORUMS": "ftp://bot:hunter2@forum.example"}, "'ftp://…@forum.example' is not an http"),
    ({"FEEDBRIDGE_FORUMS": "sql:https://bot:hunter2@forum.example"}, "'sql:https://…@forum.example': the source"),
    ({"FEEDBRIDGE_FORUMS": "https://[hunter2"}, "FEEDBRIDGE_FORUMS: 'https://…' is not an http"),
    ({"FEEDBRIDGE_FORUMS": "https://forum.example", "FEEDBRIDGE_SECRET": "0123456789abcdef0",
      "FEEDBRIDGE_CREDENTIALS": "user-api-key:hunter2key=forum.example"}, "entry 1 must start with HOST="),
    ({"FEEDBRIDGE_FORUMS": "https://forum.example", "FEEDBRIDGE_SECRET": "0123456789abcdef0",
      "FEEDBRIDGE_CREDENTIALS": "forum.example=user-api-key:x api-key:u:hunter2=forum.example"}, "entry 2 must"),
    ({"FEEDBRIDGE_FORUMS": "https://forum.example", "FEEDBRIDGE_SECRET": "0123456789abcdef0",
      "FEEDBRIDGE_CREDENTIALS": "forum.example=hunter2"}, "the entry for forum.example must start with user-api"),
    ({"FEEDBRIDGE_AUTH_REDIRECTS": "dev-discuss.pytorch.org=https://u:hunter2@b.example/x"}, "'https://…@b.example/x'"),
    ({"FEEDBRIDGE_AUTH_REDIRECTS": "dev-discuss.pytorch.org=https://u:hunter2@b.example/dev-discuss.pytorch.org/connect"},
     "with no query or user, not 'https://…@b.example/"),
    ({"REDIS_URL": "redis://:hunter2@cache:6379/0", "FEEDBRIDGE_CACHE_TTL": "x"}, "FEEDBRIDGE_CACHE_TTL must be"),
    ({"FEEDBRIDGE_SECRET": "hunter2"}, "FEEDBRIDGE_SECRET must be at least 16"),
    ({"REDIS_URL": "redis://:hunter2@[bad"}, "REDIS_URL must be a redis://, rediss:// or unix:// URL"),
    ({"REDIS_URL": "http://u:hunter2@cache/0"}, "URL with a host (redis://:PASSWORD@HOST:PORT/DB), not 'http://…@cache/0'"),
    ({"REDIS_URL": "redis://:hunter2@cache:port/0"}, "not 'redis://…@cache:port/0'"),
    ({"REDIS_URL": "unix://:hunter2@?db=1"}, "not 'unix://…@?…'"),
    ({"FEEDBRIDGE_CACHE_URL": "hunter2"}, "a value without :// (not shown: it may be a password)"),
    ({"REDIS_URL": "redis://:hunter2@/0"}, "with a host (redis://:PASSWORD@HOST:PORT/DB), not 'redis://…@/0'"),
    ({"REDIS_URL": "redis://:hunter2@cache:99999"}, "not 'redis://…@cache:99999'"),
])
def test_errors_never_echo_a_secret(env, words):
    """A user's password, a query's key, a credential written the wrong way round: the message says what is
    wrong with the value and where, with the secret parts left out."""
    with pytest.raises(ConfigError) as raised:
        Settings.from_env(env)
    assert words in str(raised.value)
    assert "hunter2" not in str(raised.value)


def test_a_static_configs_forum_is_shown_without_its_user(tmp_path):
    config = tmp_path / "feeds.toml"
    config.write_text('site_url = "https://feeds.example.org/"\n[[feeds]]\nforum = "https://bot:hunter2@forum.example/?k=hunter2"\n'
                      'name = "latest"\npath = "latest"\n', encoding="utf-8")
    with pytest.raises(Exception, match="plain base URL") as raised:
        load_build_config(config)
    assert "hunter2" not in str(raised.value)


SECRETS = {
    "FEEDBRIDGE_CACHE_URL": "redis://:hunter2@cache:6379/0",
    "FEEDBRIDGE_SECRET": "hunter2-0123456789abcdef",
    "FEEDBRIDGE_SECRET_PREVIOUS": "hunter2-fedcba9876543210",
    "FEEDBRIDGE_CREDENTIALS": "dev-discuss.pytorch.org=api-key:system:hunter2key",
    "FEEDBRIDGE_CONNECT_KEY": "-----BEGIN PRIVATE KEY-----\\nhunter2\\n-----END PRIVATE KEY-----",
}


@pytest.mark.parametrize("redis", ["FEEDBRIDGE_CACHE_URL", "REDIS_URL"])
def test_the_settings_repr_holds_no_secret(redis):
    """Every setting that can hold a secret (a password in the Redis URL, the signing secrets, the keys)
    is left out of the repr a log line or a traceback shows; forums and redirects cannot hold one."""
    env = {**SECRETS, redis: SECRETS["FEEDBRIDGE_CACHE_URL"]}
    if redis == "REDIS_URL":
        del env["FEEDBRIDGE_CACHE_URL"]
    settings = Settings.from_env(env)
    assert settings.cache_url and settings.secret and settings.connect_key and settings.credentials
    assert "hunter2" not in repr(settings)
    shown = {f.name for f in fields(Settings) if f.repr}
    assert not shown & {"cache_url", "secret", "secret_previous", "connect_key"}


def test_blank_forums_are_an_error_and_other_blank_values_their_default():
    """A deployment template's empty FEEDBRIDGE_FORUMS would read a forum nobody asked for, and gunicorn reads
    an empty WEB_CONCURRENCY as a bad integer; any other variable set to nothing (or blanks) is unset, as
    twelve-factor templates write it."""
    for blank in ("", "   "):
        with pytest.raises(ConfigError, match="FEEDBRIDGE_FORUMS is set but empty") as raised:
            Settings.from_env({"FEEDBRIDGE_FORUMS": blank})
        assert raised.value.setting == "FEEDBRIDGE_FORUMS"
        settings = Settings.from_env({"FEEDBRIDGE_CACHE_TTL": blank, "FEEDBRIDGE_CACHE_URL": blank, "REDIS_URL": "redis://r"})
        assert (settings.cache_ttl, settings.cache_url) == (300, "redis://r")
        with pytest.raises(ConfigError, match="WEB_CONCURRENCY is set but empty"):  # gunicorn reads it too
            Settings.from_env({"WEB_CONCURRENCY": blank})


@pytest.mark.parametrize("name,value", [
    ("FEEDBRIDGE_CACHE_TTL", "9" * 5000),
    ("FEEDBRIDGE_CACHE_TTL", "9" * 4000),
    ("FEEDBRIDGE_READ_TIMEOUT", "x" * 5000),
    ("FEEDBRIDGE_FORUMS", "https://" + "a" * 5000 + ".example/?q"),
    ("FEEDBRIDGE_METRICS_ALLOW", "1" * 5000),
    ("FEEDBRIDGE_MULTISITE", "dev-discuss.pytorch.org," + "a" * 5000),
])
def test_an_over_long_value_is_shown_cut_short(name, value):
    with pytest.raises(ConfigError, match=name) as raised:
        Settings.from_env({name: value})
    assert len(str(raised.value)) < 400


@pytest.mark.parametrize("forums", ["https://h.example http://h.example", "https://h.example/b https://h.example/b/"])
def test_two_urls_of_one_forum_are_refused_naming_both(forums):
    """A forum's feeds, key and budget are named by its host and path alone: `https://h` and `http://h` were
    both accepted, and only the first was ever read (the key went to whichever came first, cleartext too)."""
    with pytest.raises(ConfigError, match=r"FEEDBRIDGE_FORUMS: https://h\.example\S* and https?://h\.example\S* are one"):
        Settings.from_env({"FEEDBRIDGE_FORUMS": forums})
