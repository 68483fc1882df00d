"""Analytic models: from a hardware profile to kernel configurations, no timing."""
