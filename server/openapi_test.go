package server_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The OpenAPI document, docs/openapi.yaml, checked against the server: its
// paths and methods are exactly the routes the server registers, each
// operation declares its path parameters and answers, errors have the one
// error shape, whose codes are the server's, and every reference
// resolves.

// openAPIDoc is what the test reads of the document.
type openAPIDoc struct {
	OpenAPI    string                          `yaml:"openapi"`
	Paths      map[string]map[string]yaml.Node `yaml:"paths"`
	Components map[string]map[string]yaml.Node `yaml:"components"`
}

type openAPIOperation struct {
	OperationID string                     `yaml:"operationId"`
	Summary     string                     `yaml:"summary"`
	Security    *[]map[string][]string     `yaml:"security"`
	Parameters  []openAPIParameter         `yaml:"parameters"`
	Responses   map[string]openAPIResponse `yaml:"responses"`
}

type openAPIParameter struct {
	Ref      string `yaml:"$ref"`
	Name     string `yaml:"name"`
	In       string `yaml:"in"`
	Required bool   `yaml:"required"`
}

type openAPIResponse struct {
	Ref     string `yaml:"$ref"`
	Content map[string]struct {
		Schema struct {
			Ref string `yaml:"$ref"`
		} `yaml:"schema"`
	} `yaml:"content"`
}

var httpMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

func readOpenAPI(t *testing.T) (openAPIDoc, []byte) {
	t.Helper()
	b, err := os.ReadFile("../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc openAPIDoc
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("docs/openapi.yaml: %v", err)
	}
	return doc, b
}

// TestOpenAPIMatchesRoutes: the document's paths and methods are exactly
// the server's routes, both ways.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	doc, _ := readOpenAPI(t)
	if !strings.HasPrefix(doc.OpenAPI, "3.1.") {
		t.Errorf("openapi %q, want 3.1.x", doc.OpenAPI)
	}
	var documented []string
	for path, item := range doc.Paths {
		for method := range item {
			if slices.Contains(httpMethods, method) {
				documented = append(documented, strings.ToUpper(method)+" "+path)
			}
		}
	}
	var served []string
	for _, r := range registeredRoutes(t) {
		served = append(served, r.String())
	}
	for _, r := range served {
		if !slices.Contains(documented, r) {
			t.Errorf("route %s is not in docs/openapi.yaml", r)
		}
	}
	for _, r := range documented {
		if !slices.Contains(served, r) {
			t.Errorf("docs/openapi.yaml documents %s, which the server does not serve", r)
		}
	}
}

// TestOpenAPIOperations: every operation has a unique id and a summary,
// declares each parameter of its path, takes the tenant's key exactly when
// the route does (401 declared), and answers its errors with the error
// shape.
func TestOpenAPIOperations(t *testing.T) {
	doc, _ := readOpenAPI(t)
	authed := map[string]bool{}
	for _, r := range registeredRoutes(t) {
		authed[r.String()] = r.Authed
	}
	params := map[string]openAPIParameter{}
	for name, n := range doc.Components["parameters"] {
		var p openAPIParameter
		if err := n.Decode(&p); err != nil {
			t.Fatal(err)
		}
		params["#/components/parameters/"+name] = p
	}
	responses := map[string]openAPIResponse{}
	for name, n := range doc.Components["responses"] {
		var r openAPIResponse
		if err := n.Decode(&r); err != nil {
			t.Fatal(err)
		}
		responses["#/components/responses/"+name] = r
	}
	pathParam := regexp.MustCompile(`\{([^}]+)\}`)
	ids := map[string]string{}
	for path, item := range doc.Paths {
		var shared []openAPIParameter
		if n, ok := item["parameters"]; ok {
			if err := n.Decode(&shared); err != nil {
				t.Fatal(err)
			}
		}
		for method, n := range item {
			if !slices.Contains(httpMethods, method) {
				continue
			}
			route := strings.ToUpper(method) + " " + path
			var op openAPIOperation
			if err := n.Decode(&op); err != nil {
				t.Fatalf("%s: %v", route, err)
			}
			if op.OperationID == "" || op.Summary == "" {
				t.Errorf("%s: no operationId or summary", route)
			}
			if other, dup := ids[op.OperationID]; dup {
				t.Errorf("%s and %s share operationId %s", route, other, op.OperationID)
			}
			ids[op.OperationID] = route
			declared := map[string]bool{}
			for _, p := range append(append([]openAPIParameter(nil), shared...), op.Parameters...) {
				if p.Ref != "" {
					var ok bool
					if p, ok = params[p.Ref]; !ok {
						t.Errorf("%s: parameter %s does not resolve", route, p.Ref)
						continue
					}
				}
				if p.In == "path" {
					if !p.Required {
						t.Errorf("%s: path parameter %s is not required", route, p.Name)
					}
					declared[p.Name] = true
				}
			}
			for _, m := range pathParam.FindAllStringSubmatch(path, -1) {
				if !declared[m[1]] {
					t.Errorf("%s: path parameter %s is not declared", route, m[1])
				}
				delete(declared, m[1])
			}
			for name := range declared {
				t.Errorf("%s: declares path parameter %s, which the path has not", route, name)
			}
			public := op.Security != nil && len(*op.Security) == 0
			if isAuthed, known := authed[route]; known && public == isAuthed {
				t.Errorf("%s: public %v in the document, but the server authenticates it: %v", route, public, isAuthed)
			}
			if len(op.Responses) == 0 {
				t.Errorf("%s: no responses", route)
			}
			if _, ok := op.Responses["401"]; !ok && authed[route] {
				t.Errorf("%s: takes a key but declares no 401", route)
			}
			for status, r := range op.Responses {
				if r.Ref != "" {
					var ok bool
					if r, ok = responses[r.Ref]; !ok {
						t.Errorf("%s %s: response %s does not resolve", route, status, r.Ref)
						continue
					}
				}
				code, err := strconv.Atoi(status)
				if err != nil {
					t.Errorf("%s: response %q is not a status", route, status)
					continue
				}
				// The A2A endpoint answers JSON-RPC, its refusals too; the
				// key check before it, the API's error.
				a2aError := strings.HasPrefix(path, "/a2a/") && code != 401 && r.Content["application/json"].Schema.Ref == "#/components/schemas/A2AResponse"
				if code >= 400 && r.Content["application/json"].Schema.Ref != "#/components/schemas/Error" && !a2aError {
					t.Errorf("%s %s: the error is not the Error schema", route, status)
				}
			}
		}
	}
}

// TestOpenAPIErrorCodes: the document's error codes are the server's
// (the code… constants of its sources), both ways.
func TestOpenAPIErrorCodes(t *testing.T) {
	doc, _ := readOpenAPI(t)
	var schema struct {
		Properties struct {
			Error struct {
				Properties struct {
					Code struct {
						Enum []string `yaml:"enum"`
					} `yaml:"code"`
				} `yaml:"properties"`
			} `yaml:"error"`
		} `yaml:"properties"`
	}
	n := doc.Components["schemas"]["Error"]
	if err := n.Decode(&schema); err != nil {
		t.Fatal(err)
	}
	documented := schema.Properties.Error.Properties.Code.Enum
	served := errorCodes(t)
	slices.Sort(documented)
	if !slices.Equal(documented, served) {
		t.Errorf("docs/openapi.yaml's error codes %v, the server's %v", documented, served)
	}
}

// errorCodes reads the values of the server's code… constants from its
// sources, sorted.
func errorCodes(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "api.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	ast.Inspect(f, func(n ast.Node) bool {
		spec, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		for i, name := range spec.Names {
			if !strings.HasPrefix(name.Name, "code") || i >= len(spec.Values) {
				continue
			}
			if lit, ok := spec.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				v, _ := strconv.Unquote(lit.Value)
				codes = append(codes, v)
			}
		}
		return true
	})
	if len(codes) == 0 {
		t.Fatal("no error codes in api.go")
	}
	slices.Sort(codes)
	return codes
}

// TestOpenAPIReferences: every $ref of the document names a component it
// has.
func TestOpenAPIReferences(t *testing.T) {
	doc, raw := readOpenAPI(t)
	refs := regexp.MustCompile(`\$ref: '([^']+)'`).FindAllSubmatch(raw, -1)
	if len(refs) == 0 {
		t.Fatal("no references found")
	}
	for _, m := range refs {
		ref := string(m[1])
		parts := strings.Split(strings.TrimPrefix(ref, "#/components/"), "/")
		if !strings.HasPrefix(ref, "#/components/") || len(parts) != 2 {
			t.Errorf("reference %s: want #/components/KIND/NAME", ref)
			continue
		}
		if _, ok := doc.Components[parts[0]][parts[1]]; !ok {
			t.Errorf("reference %s does not resolve", ref)
		}
	}
}
