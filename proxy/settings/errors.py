"""The one error the settings raise."""


class SettingsError(ValueError):
    """Configuration that must stop the gateway from starting."""
