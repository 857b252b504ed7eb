"""One module per tab: ``create_ui(ctx)`` builds it, ``bind_events(ctx)`` wires it."""
