"""Webhook adapters: deliveries from other systems become triggers, threads and events."""
