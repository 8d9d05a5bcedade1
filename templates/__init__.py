"""Jinja2 templates, grouped by target (helm/, k8s/, host/, switch/, kubespray/, ansible/)."""
