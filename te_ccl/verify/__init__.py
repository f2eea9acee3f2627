"""Independent checks of what teccl produces: schedules (schedule_check) and MSCCL XML (msccl)."""
