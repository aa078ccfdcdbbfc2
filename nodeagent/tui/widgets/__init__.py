"""Widgets and renderables shared by the screens."""
