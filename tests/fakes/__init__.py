"""Test doubles that speak real wire protocols on the loopback interface only."""
