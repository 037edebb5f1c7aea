"""From the environment and the files it names to Settings.

`load_settings` is pure: the environment, the GATEWAY_CONFIG file's text
and the texts of the files variables name go in, Settings come out. So every
validation rule is unit-tested without a disk. `settings_from_environment`
is the I/O shell around it: it reads those files, checks that the files
read later are there, and reads each provider's `client_secret_file`.
Environment variables win over the GATEWAY_CONFIG file, which uses the
same key names.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

import yaml

from provisioning.placement import eligible_clusters
from provisioning.secrets import Secret, yaml_mistake
from provisioning.tiers import with_cluster_images
from proxy.settings.errors import SettingsError
from proxy.settings.model import VARIABLES, Settings, variable_name
from proxy.settings.readers import cluster_list, provider_list
from proxy.settings.variables import Form, declared

_NAMES = frozenset(variable.name for variable in VARIABLES)
_FILE_KEYS = frozenset(variable.name for variable in VARIABLES if variable.in_config_file)
# Structured (lists), so not GATEWAY_* strings: only the GATEWAY_CONFIG file holds them.
_PROVIDERS_KEY = "oidc_providers"
_CLUSTERS_KEY = "clusters"
_LISTS = (_PROVIDERS_KEY, _CLUSTERS_KEY)
# With a cluster list, these single-cluster variables mean nothing: each cluster says its own.
_SINGLE_CLUSTER = ("kubeconfig", "public_server", "public_ca_file")


# -- pure: texts in, Settings out --

def load_settings(env: Mapping[str, str], config_text: str | None = None,
                  file_texts: Mapping[str, str] | None = None) -> Settings:
    """Build and validate Settings without touching the disk. `file_texts`
    holds, by variable name, the text of each file a variable of
    Form.FILE_TEXT names (GATEWAY_TIERS_FILE, GATEWAY_OIDC_PROVIDERS); one
    with no text there keeps its default."""
    config = _config_mapping(config_text)
    values = _merge(env, config)
    file_texts = file_texts or {}
    chosen: dict[str, Any] = {}
    for field_name, variable in declared(Settings):
        text = file_texts.get(variable.name) if variable.form is Form.FILE_TEXT else values.get(variable.name)
        if text is not None:
            chosen[field_name] = variable.read(variable.name, text)
    if "oidc_providers" not in chosen:
        # The file GATEWAY_OIDC_PROVIDERS names wins over the GATEWAY_CONFIG file's own list.
        chosen["oidc_providers"] = provider_list("GATEWAY_OIDC_PROVIDERS", config.get(_PROVIDERS_KEY))
    if "listed_clusters" not in chosen:
        # Likewise the file GATEWAY_CLUSTERS names over the GATEWAY_CONFIG file's `clusters`.
        chosen["listed_clusters"] = cluster_list("GATEWAY_CLUSTERS", config.get(_CLUSTERS_KEY))
    settings = Settings(**chosen)
    _check_together(settings)
    # What onboarding and reconcile write into each namespace: the tier's
    # allow-list and the cluster's own.
    return replace(settings, tiers=with_cluster_images(settings.tiers, settings.shared_images))


def _config_mapping(config_text: str | None) -> dict[str, Any]:
    if not config_text:
        return {}
    try:
        loaded: Any = yaml.safe_load(config_text) or {}
    except yaml.YAMLError as error:
        raise SettingsError(f"GATEWAY_CONFIG is {yaml_mistake(error)}") from None
    if not isinstance(loaded, dict):
        raise SettingsError("GATEWAY_CONFIG must be a YAML mapping of GATEWAY_* keys")
    return loaded


def _merge(env: Mapping[str, str], config: Mapping[Any, Any]) -> dict[str, str]:
    """Each variable's text: the environment's, else the GATEWAY_CONFIG file's."""
    from_file = {str(key): value for key, value in config.items() if key not in _LISTS}
    unknown = sorted(set(from_file) - _FILE_KEYS)
    if unknown:
        raise SettingsError(f"unknown keys in GATEWAY_CONFIG: {', '.join(unknown)}")
    merged = {key: _config_text(value) for key, value in from_file.items()}
    _refuse_empty({key: text for key, text in env.items() if key in _NAMES})
    _refuse_empty(merged)
    merged.update({key: text for key, text in env.items() if key in _NAMES})
    return merged


def _config_text(value: Any) -> str:
    """A GATEWAY_CONFIG value as the environment would spell it: a list
    comma-separated, nothing (`KEY:`, YAML's null) as empty."""
    if value is None:
        return ""
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


def _refuse_empty(values: Mapping[str, str]) -> None:
    """A variable set to nothing is a mistake (a template's missing value),
    never a way to ask for its default: an empty GATEWAY_DATABASE_URL would
    start dev mode with a generated session key, an empty GATEWAY_KUBECONFIG
    use ~/.kube/config, an empty GATEWAY_REGISTRATION turn registration on.
    Unset, each keeps its default."""
    empty = sorted(name for name, text in values.items() if not text.strip())
    if empty:
        raise SettingsError(f"{', '.join(empty)} {'is' if len(empty) == 1 else 'are'} set but empty: "
                            "give a value, or leave it out for its default")


def _check_together(settings: Settings) -> None:
    """The rules that span variables."""
    if (settings.tls_cert_file is None) != (settings.tls_key_file is None):
        raise SettingsError("GATEWAY_TLS_CERT_FILE and GATEWAY_TLS_KEY_FILE go together")
    if settings.database_url is not None and settings.session_secret is None:
        raise SettingsError("GATEWAY_SESSION_SECRET is required outside dev mode")
    if settings.shutdown_drain_seconds + 1 > settings.shutdown_timeout_seconds:
        # The rest of the stop closes the database and writes queued audit rows.
        raise SettingsError("GATEWAY_SHUTDOWN_TIMEOUT_SECONDS must exceed GATEWAY_SHUTDOWN_DRAIN_SECONDS "
                            "by at least 1 s (the rest of the stop needs it)")
    if settings.proxy_token_refresh_margin_seconds >= settings.proxy_token_ttl_seconds:
        raise SettingsError("GATEWAY_PROXY_TOKEN_REFRESH_SECONDS must be less than GATEWAY_PROXY_TOKEN_TTL_SECONDS")
    _check_audit_listener(settings)
    _check_clusters(settings)
    if settings.metrics_listen.port == settings.listen.port != 0:
        raise SettingsError("GATEWAY_METRICS_LISTEN needs a port of its own: /metrics is never served on GATEWAY_LISTEN")


def _check_clusters(settings: Settings) -> None:
    """A cluster list replaces the single-cluster variables (both set is a
    mistake, named); every cluster a tier names must be configured, and a
    tier's rules must leave it somewhere to go."""
    if settings.listed_clusters:
        both = [variable_name(field) for field in _SINGLE_CLUSTER if getattr(settings, field) is not None]
        if both:
            raise SettingsError(f"GATEWAY_CLUSTERS and {', '.join(both)} are both set: with a cluster list each "
                                "cluster names its own kubeconfig, public_server and public_ca_file; "
                                f"leave {', '.join(both)} out")
    known = {cluster.name: cluster for cluster in settings.clusters}
    for tier in settings.tiers.values():
        unknown = [name for name in tier.clusters if name not in known]
        if unknown:
            raise SettingsError(f"GATEWAY_TIERS_FILE: tier {tier.name} names clusters that are not configured: "
                                f"{', '.join(unknown)} (configured: {', '.join(sorted(known))})")
        if (tier.clusters or tier.cluster_selector or tier.dedicated) and not eligible_clusters(tier, known.values()):
            kind = "dedicated" if tier.dedicated else "shared"
            raise SettingsError(f"GATEWAY_TIERS_FILE: tier {tier.name} allows no configured {kind} cluster "
                                "(check its clusters, cluster_selector and dedicated)")


_AUDIT_FILES = ("audit_tls_cert_file", "audit_tls_key_file", "audit_client_ca")


def _check_audit_listener(settings: Settings) -> None:
    """The audit listener takes its certificate, key and client CA together, or is off."""
    missing = [variable_name(field) for field in _AUDIT_FILES if getattr(settings, field) is None]
    if settings.audit_listen is None:
        given = [variable_name(field) for field in _AUDIT_FILES if getattr(settings, field) is not None]
        if given:
            raise SettingsError(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} set but GATEWAY_AUDIT_LISTEN "
                                "is not: set it too, or leave the audit listener's files out")
        return
    if missing:
        raise SettingsError(f"GATEWAY_AUDIT_LISTEN needs {', '.join(missing)} (the audit listener serves TLS and "
                            "admits only client certificates from GATEWAY_AUDIT_CLIENT_CA)")
    taken = {settings.listen.port, settings.metrics_listen.port} - {0}
    if settings.audit_listen.port in taken:
        raise SettingsError("GATEWAY_AUDIT_LISTEN needs a port of its own (not GATEWAY_LISTEN's "
                            "or GATEWAY_METRICS_LISTEN's)")


# -- I/O: the files the variables name --

def settings_from_environment(env: Mapping[str, str] | None = None) -> Settings:
    """Read the GATEWAY_CONFIG file and the files variables name, build
    Settings, then check the disk for what is read only later."""
    env = os.environ if env is None else env
    config_path = env.get("GATEWAY_CONFIG")
    config_text = _read("GATEWAY_CONFIG", config_path) if config_path else None
    values = _merge(env, _config_mapping(config_text))
    file_texts = {variable.name: _read(variable.name, values[variable.name]) for variable in VARIABLES
                  if variable.form is Form.FILE_TEXT and values.get(variable.name)}
    settings = load_settings(env, config_text, file_texts)
    check_files(settings)
    return with_secret_files(settings)


def _read(name: str, path: str) -> str:
    try:
        return Path(path).expanduser().read_text()
    except OSError as error:
        raise SettingsError(f"{name}: cannot read {path}: {error.strerror}") from None


def check_files(settings: Settings) -> None:
    """Files read only when needed (the CA, into each kubeconfig; the TLS
    certificate and key, as serving starts): missing, one would be a 500 on
    every download or a traceback then, so each must be there at start-up."""
    for field_name, variable in declared(Settings):
        file: Path | None = getattr(settings, field_name) if variable.form is Form.FILE else None
        if file is not None and not file.is_file():
            raise SettingsError(f"{variable.name}: {file} is not a file")
    for cluster in settings.listed_clusters:
        for key, file in (("kubeconfig", cluster.kubeconfig), ("public_ca_file", cluster.public_ca_file)):
            if file is not None and not file.is_file():
                raise SettingsError(f"GATEWAY_CLUSTERS: cluster {cluster.name!r}: {key} {file} is not a file")


def with_secret_files(settings: Settings) -> Settings:
    """Read each provider's `client_secret_file` (the I/O half of the providers' parsing)."""
    providers = []
    for provider in settings.oidc_providers:
        if provider.client_secret is None and provider.client_secret_file is not None:
            try:
                text = provider.client_secret_file.read_text().strip()
            except OSError as error:
                raise SettingsError(f"OIDC provider {provider.name!r}: cannot read client_secret_file: "
                                    f"{error.strerror}") from None
            if not text:
                raise SettingsError(f"OIDC provider {provider.name!r}: client_secret_file is empty")
            provider = replace(provider, client_secret=Secret(text))
        providers.append(provider)
    return replace(settings, oidc_providers=tuple(providers))
