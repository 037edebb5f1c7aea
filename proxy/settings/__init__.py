"""The gateway's configuration: one frozen object, built once at start-up.

Adding a knob is one field on `Settings` (proxy/settings/model.py), e.g.
`name: float = setting(60.0, env="GATEWAY_NAME", read=readers.seconds)`,
then an attribute docstring saying why it exists. Its row in the README's
configuration table is the only other place it appears; a test checks it.

Readers (readers.py) turn a variable's text into a value and never touch
the disk; loading.py merges the GATEWAY_CONFIG file with the environment,
and is the one module that reads files.
"""

from proxy.settings.errors import SettingsError, StartupError
from proxy.settings.loading import check_files, load_settings, settings_from_environment, with_secret_files
from proxy.settings.model import VARIABLES, Settings, variable_name
from proxy.settings.values import MAX_COUNT, MAX_TOKEN_TTL_SECONDS, MIN_TOKEN_TTL_SECONDS, YEAR_SECONDS, HostPort, \
    RateLimit
from proxy.settings.variables import Form, Variable, setting

__all__ = [
    "MAX_COUNT", "MAX_TOKEN_TTL_SECONDS", "MIN_TOKEN_TTL_SECONDS", "VARIABLES", "YEAR_SECONDS", "Form", "HostPort",
    "RateLimit", "Settings", "SettingsError", "StartupError", "Variable", "check_files", "load_settings", "setting",
    "settings_from_environment", "variable_name", "with_secret_files",
]
