"""OIDC providers as configured: a name kept for the auth modules.

The parsing is pure configuration, so it lives with the settings
(proxy.settings.providers), which must not import auth.
"""

from proxy.settings.providers import (DEFAULT_SCOPES, OIDCProvider, ProviderConfigError, is_secure_url,
                                      parse_provider, parse_providers)

__all__ = ["DEFAULT_SCOPES", "OIDCProvider", "ProviderConfigError", "is_secure_url", "parse_provider",
           "parse_providers"]
