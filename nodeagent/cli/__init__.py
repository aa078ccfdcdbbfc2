"""The command-line face: click commands that turn arguments into requests and print what comes back."""
