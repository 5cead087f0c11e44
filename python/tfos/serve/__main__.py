"""``python -m tfos.serve``: one model server of tfos serve (tfos.serve.server)."""
import sys

if __name__ == "__main__":
    # imported as tfos.serve, not run as __main__: a loader's
    # tfos.serve.Model is then the package's Model
    from tfos.serve import main
    sys.exit(main())
