"""teccl: compile collective-communication schedules with the TE-CCL flow model on OR-Tools."""

__version__ = "0.1.0"
