"""The bundled idempotent charge service and its `charge` job kind."""
