"""Test helpers for the log, the sequencer and crash/power-loss recovery."""
