// needy says what it needs of its sandbox, for TestJavaScriptNeeds.
import { need, tool } from "../../../pdk/ts/agentic";

need({ allowedHosts: ["api.example.com"], kv: true });

tool({ name: "needy", description: "Answers.", execute: () => "ok" });
