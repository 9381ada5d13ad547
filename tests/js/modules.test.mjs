import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { test } from "node:test";

const folder = new URL("../../static/js/task/", import.meta.url);
const modules = readdirSync(folder).filter((name) => name.endsWith(".js"));

test("every module of the page script stays small", () => {
  for (const name of modules) {
    const lines = readFileSync(new URL(name, folder), "utf8").split("\n").length;
    assert.ok(lines <= 450, `${name} has ${lines} lines`);
  }
});

test("every module but the entry loads without a page, so each can be tested alone", async () => {
  for (const name of modules.filter((name) => name !== "main.js")) {
    await import(new URL(name, folder));
  }
});
