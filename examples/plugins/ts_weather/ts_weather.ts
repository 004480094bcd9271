// ts_weather is an agentic-host plugin in TypeScript: one read tool,
// weather, that asks a weather service for a city's current conditions
// through the host (HTTP only to the hosts the tenant grants) and keeps
// each answer in the tenant's key-value store for ten minutes, so that the
// same question in the same ten minutes costs no request.
//
// Configuration (set by the host for the tenant): "endpoint", the
// service's base URL (default https://api.open-meteo.com/v1/forecast:
// grant api.open-meteo.com), queried with ?latitude=&longitude=&current=.
//
// Build: agentic-host plugin build .   (scripts/build-plugins.sh builds it
// with the kit in pdk/ts)

import { config, http, kv, log, tool } from "../../../pdk/ts/agentic";

interface Input {
  city: string;
  latitude: number;
  longitude: number;
}

interface Weather {
  city: string;
  temperature_c: number;
  wind_kmh: number;
  observed: string;
  cached: boolean;
}

const TTL_MS = 10 * 60 * 1000;

tool<Input>({
  name: "weather",
  description: "The current temperature and wind at a place, from a weather service (cached for ten minutes).",
  inputSchema: {
    type: "object",
    properties: {
      city: { type: "string", description: "The place's name, as the user said it." },
      latitude: { type: "number", minimum: -90, maximum: 90 },
      longitude: { type: "number", minimum: -180, maximum: 180 },
    },
    required: ["city", "latitude", "longitude"],
  },
  effect: "read",
  idempotent: true,
  execute: ({ city, latitude, longitude }): Weather => {
    const key = `weather:${latitude.toFixed(2)},${longitude.toFixed(2)}`;
    const hit = kv.get(key);
    if (hit !== undefined) {
      const kept = JSON.parse(hit) as { at: number; weather: Weather };
      if (Date.now() - kept.at < TTL_MS) return { ...kept.weather, city, cached: true };
    }
    const endpoint = config("endpoint") ?? "https://api.open-meteo.com/v1/forecast";
    const url = `${endpoint}?latitude=${latitude}&longitude=${longitude}&current=temperature_2m,wind_speed_10m`;
    const res = http.get(url, { Accept: "application/json" });
    if (res.status !== 200) throw new Error(`the weather service answered ${res.status}: ${res.body.slice(0, 200)}`);
    const body = res.json<{ current?: { time: string; temperature_2m: number; wind_speed_10m: number } }>();
    if (!body.current) throw new Error("the weather service's answer has no current conditions");
    const weather: Weather = {
      city,
      temperature_c: body.current.temperature_2m,
      wind_kmh: body.current.wind_speed_10m,
      observed: body.current.time,
      cached: false,
    };
    kv.set(key, JSON.stringify({ at: Date.now(), weather }));
    log.info(`weather for ${city}: ${weather.temperature_c} °C`);
    return weather;
  },
});
