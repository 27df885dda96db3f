"""The example application: endpoints served by examples/service.ini."""
