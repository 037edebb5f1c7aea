"""The one error the settings raise."""


class SettingsError(ValueError):
    """Configuration that must stop the gateway from starting."""


class StartupError(SettingsError):
    """A setting that reads well but that this machine cannot honour at
    start: a port taken, a database that refuses. The message is one line
    that names the variable to change."""
