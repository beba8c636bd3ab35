"""Alerting: rules over telemetry series and events, a pure evaluator, silences and notifiers."""
